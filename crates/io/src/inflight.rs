//! Row-group reads in flight, as many as [`Depth`] says: permits for reads, each read timed,
//! and the consumer's pace measured where it takes row groups ([`Metered`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::depth::Depth;
use crate::error::IoError;

/// Permits for reads, granted up to the depth's target.
#[derive(Debug)]
pub struct Slots {
    permits: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    depth: Depth,
    /// Permits in existence, held or not.
    granted: usize,
    /// Permits held (reads in flight).
    held: usize,
}

impl Slots {
    /// Permits for as many reads as `depth` asks for, as it measures them.
    pub fn new(depth: Depth) -> Arc<Slots> {
        let granted = depth.target();
        Arc::new(Slots {
            permits: Arc::new(Semaphore::new(granted)),
            state: Mutex::new(State {
                depth,
                granted,
                held: 0,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads in flight the depth asks for now.
    pub fn target(&self) -> usize {
        self.state().depth.target()
    }

    /// Reads in flight as measured, a probe's brief drop to the floor left out.
    pub fn measured(&self) -> usize {
        self.state().depth.measured()
    }

    /// A read's time as the depth counts it, once measured.
    pub fn read_latency(&self) -> Option<Duration> {
        self.state().depth.read_latency()
    }

    /// A permit for one read, timed from now.
    pub async fn acquire(self: &Arc<Self>) -> Result<Slot, IoError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| IoError::Internal(e.to_string()))?;
        let in_flight = {
            let mut state = self.state();
            state.held += 1;
            state.held
        };
        Ok(Slot {
            permit: Some(permit),
            start: Instant::now(),
            in_flight,
            slots: self.clone(),
        })
    }

    /// Grants permits up to the target; with `returned`, a permit given back is kept out of
    /// circulation instead while more are granted than the target.
    fn settle(&self, state: &mut State, returned: Option<OwnedSemaphorePermit>) {
        let target = state.depth.target();
        if target > state.granted {
            self.permits.add_permits(target - state.granted);
            state.granted = target;
        } else if target < state.granted
            && let Some(permit) = returned
        {
            permit.forget();
            state.granted -= 1;
        }
    }

    /// The consumer took a row group after `busy` of its own work.
    fn taken(&self, busy: Duration) {
        let mut state = self.state();
        state.depth.item_taken(busy);
        self.settle(&mut state, None);
    }
}

/// One read's permit; [`done`](Self::done) when it finished (a failed or dropped read gives
/// its permit back untimed).
#[derive(Debug)]
pub struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    start: Instant,
    /// Reads in flight when it started, itself included.
    in_flight: usize,
    slots: Arc<Slots>,
}

impl Slot {
    /// The read finished: its time counts, and its permit goes back (or retires).
    pub fn done(mut self) {
        let mut state = self.slots.state();
        state.held -= 1;
        state.depth.read_done(self.start.elapsed(), self.in_flight);
        self.slots.settle(&mut state, self.permit.take());
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Not done (failed or dropped): no longer in flight, untimed.
        if self.permit.is_some() {
            self.slots.state().held -= 1;
        }
    }
}

/// The row groups a consumer takes, timing its pace: the time from taking one to asking for the
/// next is its own work; the time it then waits is the stream's.
pub struct Metered<S> {
    inner: S,
    slots: Arc<Slots>,
    asked: Option<Instant>,
    taken: Option<Instant>,
}

impl<S> Metered<S> {
    /// `inner`, its consumer's pace fed to `slots`.
    pub fn new(inner: S, slots: Arc<Slots>) -> Self {
        Metered {
            inner,
            slots,
            asked: None,
            taken: None,
        }
    }
}

impl<S: Stream + Unpin> Stream for Metered<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let asked = *self.asked.get_or_insert_with(Instant::now);
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(_)) = &polled {
            if let Some(taken) = self.taken {
                self.slots.taken(asked.saturating_duration_since(taken));
            }
            self.taken = Some(Instant::now());
            self.asked = None;
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permits_follow_the_depth_up_and_down() {
        let slots = Slots::new(Depth::new(2, 8));
        assert_eq!(slots.permits.available_permits(), 2);
        // Slow start: each finished read grants one more.
        for _ in 0..2 {
            slots.acquire().await.unwrap().done();
        }
        assert_eq!(slots.permits.available_permits(), 4);
        // A consumer slower than the reads need: the floor again, one permit retired per read.
        for _ in 0..8 {
            let slot = slots.acquire().await.unwrap();
            slots.taken(Duration::from_secs(1));
            slot.done();
        }
        assert_eq!(slots.target(), 2);
        assert_eq!(slots.permits.available_permits(), 2);
        // A dropped read gives its permit back.
        let slot = slots.acquire().await.unwrap();
        assert_eq!(slots.permits.available_permits(), 1);
        drop(slot);
        assert_eq!(slots.permits.available_permits(), 2);
    }

    #[tokio::test]
    async fn the_consumers_waits_are_not_its_pace() {
        use futures::StreamExt;
        let slots = Slots::new(Depth::new(1, 64));
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut metered = Metered::new(tokio_stream_of(rx), slots.clone());
        for i in 0..8 {
            // Each read takes 20 ms and the consumer waits for it; then it works 1 ms.
            let slot = slots.acquire().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                tx.send(i).await.unwrap();
            });
            metered.next().await.unwrap();
            slot.done();
            std::thread::sleep(Duration::from_millis(1));
        }
        let depth = slots.state().depth.clone();
        // ~1 ms; waits counted as work would give ~21 ms.
        let pace = depth.consumer_pace().unwrap();
        assert!(
            pace < Duration::from_millis(10),
            "{depth:?}: the waits counted as the consumer's work"
        );
    }

    fn tokio_stream_of(
        mut rx: tokio::sync::mpsc::Receiver<i32>,
    ) -> Pin<Box<dyn Stream<Item = i32> + Send>> {
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
