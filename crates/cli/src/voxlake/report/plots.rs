//! The report's charts, drawn by `plotters` as inline SVG: no script and no font file (the
//! browser sets the text), so the page opens with no network.

use plotters::coord::ranged1d::{SegmentValue, SegmentedCoord};
use plotters::coord::types::{RangedCoordf64, RangedCoordusize};
use plotters::prelude::*;

/// A chart that could not be drawn.
pub(super) type Error = Box<dyn std::error::Error>;

/// A chart's size in pixels.
const SIZE: (u32, u32) = (760, 300);

/// The colour of the `i`th series or part.
fn colour(i: usize) -> RGBColor {
    // Tableau's ten: told apart by most readers, colour-blind ones included.
    const TEN: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = TEN[i % TEN.len()];
    RGBColor(r, g, b)
}

/// The highest value an axis shows for data up to `max`: `headroom` times it (1.1 above a bar
/// or line, 1 along time), and never an empty range.
fn top(max: f64, headroom: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * headroom
    } else {
        1.0
    }
}

/// `value` in three significant figures with an SI prefix (12.3k, 4.56M).
pub(super) fn short(value: f64) -> String {
    let (scaled, prefix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let digits = match scaled.abs() {
        v if v >= 100.0 || v == 0.0 => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        _ => 3,
    };
    format!("{scaled:.digits$}{prefix}")
}

/// A time in seconds in its natural unit (850 ns, 1.2 µs, 35 ms, 2.5 s).
pub(super) fn duration(seconds: f64) -> String {
    match seconds {
        s if s >= 1.0 => format!("{} s", short(s)),
        s if s >= 1e-3 => format!("{} ms", short(s * 1e3)),
        s if s >= 1e-6 => format!("{} µs", short(s * 1e6)),
        s => format!("{} ns", short(s * 1e9)),
    }
}

/// One line of a line chart.
pub(super) struct Line {
    /// Its name in the legend.
    pub(super) name: String,
    /// Its points, x ascending.
    pub(super) points: Vec<(f64, f64)>,
}

/// Lines over a shared x axis (time, in the report), a legend when there are several.
pub(super) fn lines(x_desc: &str, y_desc: &str, lines: &[Line]) -> Result<String, Error> {
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = top(all().map(|p| p.0).fold(0.0, f64::max), 1.0);
    let y_max = top(all().map(|p| p.1).fold(0.0, f64::max), 1.1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .y_label_formatter(&|v| short(*v))
            .draw()?;
        for (i, line) in lines.iter().enumerate() {
            let style = colour(i).stroke_width(2);
            chart
                .draw_series(LineSeries::new(line.points.iter().copied(), style))?
                .label(line.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        if lines.len() > 1 {
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One bar of a stacked bar chart.
pub(super) struct Stack {
    /// Its label under the axis.
    pub(super) label: String,
    /// Its parts, in the order of the chart's part names.
    pub(super) parts: Vec<f64>,
}

/// Bars of stacked parts, one colour a part, a legend naming them.
pub(super) fn stacked_bars(
    part_names: &[&str],
    stacks: &[Stack],
    y_desc: &str,
) -> Result<String, Error> {
    let y_max = top(
        stacks
            .iter()
            .map(|s| s.parts.iter().sum::<f64>())
            .fold(0.0, f64::max),
        1.1,
    );
    let labels: Vec<&str> = stacks.iter().map(|s| s.label.as_str()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = categories(&root, &labels, y_max)?;
        draw_axes(&mut chart, &labels, ("", y_desc))?;
        for (p, name) in part_names.iter().enumerate() {
            let mut rects = Vec::new();
            for (i, stack) in stacks.iter().enumerate() {
                let below: f64 = stack.parts[..p].iter().sum();
                let value = stack.parts.get(p).copied().unwrap_or(0.0);
                if value > 0.0 {
                    rects.push(bar(i, below, below + value, colour(p)));
                }
            }
            let style = colour(p).filled();
            chart
                .draw_series(rects)?
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], style));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present()?;
    }
    Ok(svg)
}

/// A horizontal line across a bar chart, named in its legend.
pub(super) struct Rule {
    /// Its name in the legend.
    pub(super) name: String,
    /// Its height.
    pub(super) value: f64,
}

/// One bar a label; a flagged bar is drawn red; rules across (a median, a threshold).
pub(super) fn bars(
    labels: &[String],
    values: &[f64],
    flagged: &[bool],
    rules: &[Rule],
    (x_desc, y_desc): (&str, &str),
) -> Result<String, Error> {
    let y_max = top(
        values
            .iter()
            .chain(rules.iter().map(|r| &r.value))
            .copied()
            .fold(0.0, f64::max),
        1.1,
    );
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = categories(&root, &labels, y_max)?;
        draw_axes(&mut chart, &labels, (x_desc, y_desc))?;
        let red = colour(3);
        chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
            let colour = if flagged.get(i) == Some(&true) {
                red
            } else {
                colour(0)
            };
            bar(i, 0.0, v, colour)
        }))?;
        for (r, rule) in rules.iter().enumerate() {
            let style = colour(r + 1).stroke_width(2);
            let ends = [
                (SegmentValue::Exact(0), rule.value),
                (SegmentValue::Exact(labels.len()), rule.value),
            ];
            chart
                .draw_series(LineSeries::new(ends, style))?
                .label(rule.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        if !rules.is_empty() {
            legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The chart's legend: each series' name and key, in a box at `position`.
fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> Result<(), Error> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .position(position)
        .draw()?;
    Ok(())
}

type Categories<'a> =
    ChartContext<'a, SVGBackend<'a>, Cartesian2d<SegmentedCoord<RangedCoordusize>, RangedCoordf64>>;

/// A chart with one slot a label along x and values from 0 to `y_max` up.
fn categories<'a>(
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    labels: &[&str],
    y_max: f64,
) -> Result<Categories<'a>, Error> {
    Ok(ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        // A usize range is inclusive to plotters: slots 0..=n-1.
        .build_cartesian_2d((0..labels.len().max(1) - 1).into_segmented(), 0f64..y_max)?)
}

/// The axes of a chart of [`categories`], with `labels` under their slots.
fn draw_axes(
    chart: &mut Categories<'_>,
    labels: &[&str],
    (x_desc, y_desc): (&str, &str),
) -> Result<(), Error> {
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|v| label_at(labels, v))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    Ok(())
}

/// The label of the slot whose centre `v` is; of many slots, every few's only, so that the
/// labels do not run into one another.
fn label_at(labels: &[&str], v: &SegmentValue<usize>) -> String {
    let every = labels.len().div_ceil(MAX_LABELS).max(1);
    match v {
        SegmentValue::CenterOf(i) if i % every == 0 => {
            labels.get(*i).map_or_else(String::new, |l| l.to_string())
        }
        _ => String::new(),
    }
}

/// The most labels under a bar chart's slots.
const MAX_LABELS: usize = 8;

/// A bar in slot `i` from `low` to `high`.
fn bar(i: usize, low: f64, high: f64, colour: RGBColor) -> Rectangle<(SegmentValue<usize>, f64)> {
    let mut rect = Rectangle::new(
        [
            (SegmentValue::Exact(i), high),
            (SegmentValue::Exact(i + 1), low),
        ],
        colour.filled(),
    );
    rect.set_margin(0, 0, 6, 6);
    rect
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_times_read_short() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.25), "0.250");
        assert_eq!(short(12_345.0), "12.3k");
        assert_eq!(short(4_560_000.0), "4.56M");
        assert_eq!(duration(2.5), "2.50 s");
        assert_eq!(duration(0.035), "35.0 ms");
        assert_eq!(duration(1.2e-6), "1.20 µs");
        assert_eq!(duration(5.12e-7), "512 ns");
    }

    #[test]
    fn charts_draw_their_series_and_names() {
        let svg = lines(
            "s",
            "samples/s",
            &[
                Line {
                    name: "rank 0".into(),
                    points: vec![(0.5, 100.0), (1.0, 200.0)],
                },
                Line {
                    name: "rank <1>".into(),
                    points: vec![(0.5, 50.0)],
                },
            ],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("rank 0") && svg.contains("rank &lt;1&gt;"),
            "{svg}"
        );
        let svg = stacked_bars(
            &["fetch", "decode"],
            &[Stack {
                label: "rank 0".into(),
                parts: vec![1.0, 2.0],
            }],
            "s",
        )
        .unwrap();
        // Each part's colour twice: its bar and its legend key.
        assert_eq!(svg.matches("#1F77B4").count(), 2, "{svg}");
        assert_eq!(svg.matches("#FF7F0E").count(), 2, "{svg}");
        let svg = bars(
            &["a".into(), "b".into()],
            &[1.0, 3.0],
            &[false, true],
            &[Rule {
                name: "median".into(),
                value: 2.0,
            }],
            ("rank", "s"),
        )
        .unwrap();
        assert!(svg.contains("median") && svg.contains("#D62728"), "{svg}");
        // One bar alone fills its chart's one slot.
        let svg = bars(&["a".into()], &[1.0], &[], &[], ("", "")).unwrap();
        assert!(svg.contains(">\na\n</text>"), "{svg}");
        assert_eq!(svg.matches("fill=\"#1F77B4\"").count(), 1, "{svg}");
        // Nothing to draw still draws (empty axes), never a degenerate range.
        assert!(lines("s", "x", &[]).unwrap().starts_with("<svg"));
    }
}
