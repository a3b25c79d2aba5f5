//! `voxlake bench`'s counters over time, for the report's plots: a point every interval, at
//! most [`MAX_POINTS`] kept (when full, every other point goes and the interval doubles), so a
//! run of any length draws from a bounded series.

use std::time::{Duration, Instant};

use voxlake_loader::Loader;

/// The most points a series keeps.
pub(super) const MAX_POINTS: usize = 1024;

/// The first interval between points.
const FIRST_INTERVAL: Duration = Duration::from_millis(100);

/// The loader's counters at one moment of the run, each a total since the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Point {
    /// Seconds since the run began.
    pub(super) t_s: f64,
    /// Samples delivered.
    pub(super) samples: u64,
    /// Bytes of column chunks read.
    pub(super) bytes_read: u64,
    /// Ranged requests of a remote store.
    pub(super) store_requests: u64,
    /// Row groups delivered.
    pub(super) row_groups: u64,
    /// Seconds the loop waited inside `next()`.
    pub(super) consumer_wait_s: f64,
}

impl Point {
    /// The loader's counters now, `start` being when the run began.
    pub(super) fn of(loader: &Loader, start: Instant) -> Point {
        let stats = loader.stats();
        Point {
            t_s: start.elapsed().as_secs_f64(),
            samples: stats.samples,
            bytes_read: stats.stream.bytes,
            store_requests: stats.stream.store_requests,
            row_groups: stats.stream.row_groups,
            consumer_wait_s: stats.consumer_wait.as_secs_f64(),
        }
    }
}

/// Points taken as the run goes.
#[derive(Debug)]
pub(super) struct Series {
    interval: Duration,
    last: Option<Instant>,
    points: Vec<Point>,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            interval: FIRST_INTERVAL,
            last: None,
            points: Vec::new(),
        }
    }
}

impl Series {
    /// Whether a point taken at `now` would be kept: the first, or an interval after the last.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|last| now.duration_since(last) >= self.interval)
    }

    /// Keeps `point`, taken at `now`; a full series first drops every other point and doubles
    /// its interval.
    pub(super) fn push(&mut self, now: Instant, point: Point) {
        if self.points.len() == MAX_POINTS {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.interval *= 2;
        }
        self.points.push(point);
        self.last = Some(now);
    }

    /// Keeps the run's last point, in the place of the last one kept where that was taken less
    /// than an interval ago (a rate over a sliver of time says nothing).
    pub(super) fn finish(&mut self, now: Instant, point: Point) {
        if !self.due(now) && self.points.len() > 1 {
            self.points.pop();
        }
        self.push(now, point);
    }

    /// The series as columns: `{"t_s": [...], "samples": [...], ...}`.
    pub(super) fn to_json(&self) -> serde_json::Value {
        let column = |f: fn(&Point) -> serde_json::Value| -> serde_json::Value {
            self.points.iter().map(f).collect()
        };
        serde_json::json!({
            "t_s": column(|p| p.t_s.into()),
            "samples": column(|p| p.samples.into()),
            "bytes_read": column(|p| p.bytes_read.into()),
            "store_requests": column(|p| p.store_requests.into()),
            "row_groups": column(|p| p.row_groups.into()),
            "consumer_wait_s": column(|p| p.consumer_wait_s.into()),
        })
    }

    /// The series [`to_json`](Self::to_json) wrote; `None` where a column is missing, of
    /// another length or holds something other than numbers.
    pub(super) fn points_from_json(value: &serde_json::Value) -> Option<Vec<Point>> {
        let column = |name: &str| -> Option<Vec<f64>> {
            value
                .get(name)?
                .as_array()?
                .iter()
                .map(serde_json::Value::as_f64)
                .collect()
        };
        let t = column("t_s")?;
        let columns = [
            column("samples")?,
            column("bytes_read")?,
            column("store_requests")?,
            column("row_groups")?,
            column("consumer_wait_s")?,
        ];
        if columns.iter().any(|c| c.len() != t.len()) {
            return None;
        }
        Some(
            (0..t.len())
                .map(|i| Point {
                    t_s: t[i],
                    samples: columns[0][i] as u64,
                    bytes_read: columns[1][i] as u64,
                    store_requests: columns[2][i] as u64,
                    row_groups: columns[3][i] as u64,
                    consumer_wait_s: columns[4][i],
                })
                .collect(),
        )
    }
}

/// The rate of one counter between consecutive points: `(t, per second)` at each interval's
/// end; intervals of no length are left out.
pub(super) fn rates(points: &[Point], counter: fn(&Point) -> f64) -> Vec<(f64, f64)> {
    points
        .windows(2)
        .filter(|w| w[1].t_s > w[0].t_s)
        .map(|w| {
            let dt = w[1].t_s - w[0].t_s;
            (w[1].t_s, (counter(&w[1]) - counter(&w[0])) / dt)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_s: f64, samples: u64) -> Point {
        Point {
            t_s,
            samples,
            bytes_read: samples * 10,
            store_requests: samples / 2,
            row_groups: samples / 4,
            consumer_wait_s: t_s / 2.0,
        }
    }

    #[test]
    fn a_full_series_halves_and_keeps_its_ends() {
        let start = Instant::now();
        let mut s = Series::default();
        assert!(s.due(start));
        for i in 0..(3 * MAX_POINTS as u64) {
            let now = start + Duration::from_millis(100 * i);
            if s.due(now) {
                s.push(now, point(i as f64 / 10.0, i));
            }
        }
        let points = &s.points;
        assert!(points.len() <= MAX_POINTS, "{}", points.len());
        assert!(points.len() > MAX_POINTS / 2, "{}", points.len());
        assert_eq!(points[0].samples, 0);
        // In order, evenly spaced after the halvings.
        assert!(points.windows(2).all(|w| w[0].t_s < w[1].t_s));
        // Full twice over 307 s: 0.4 s apart now.
        assert_eq!(s.interval, FIRST_INTERVAL * 4);
        // The last point, 0.1 s after the one before, takes its place.
        let (len, last) = (s.points.len(), s.points[s.points.len() - 1]);
        let end = start + Duration::from_secs_f64(last.t_s + 0.1);
        s.finish(end, point(last.t_s + 0.1, 1 << 20));
        assert_eq!(s.points.len(), len);
        assert_eq!(s.points[len - 1].samples, 1 << 20);
    }

    #[test]
    fn json_round_trips_and_rates_are_per_second() {
        let start = Instant::now();
        let mut s = Series::default();
        for (i, (t, n)) in [(0.0, 0), (0.5, 100), (1.0, 300)].into_iter().enumerate() {
            s.push(start + Duration::from_millis(500 * i as u64), point(t, n));
        }
        let back = Series::points_from_json(&s.to_json()).unwrap();
        assert_eq!(back, s.points);
        assert_eq!(
            rates(&back, |p| p.samples as f64),
            vec![(0.5, 200.0), (1.0, 400.0)]
        );
        let mut bad = s.to_json();
        bad["samples"] = serde_json::json!([1, 2]);
        assert_eq!(Series::points_from_json(&bad), None);
    }
}
