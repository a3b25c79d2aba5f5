//! Driving a stream in a task of its own, ahead of its consumer, with panics reported.

use std::panic::AssertUnwindSafe;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};

use crate::error::panic_message;

/// Aborts a spawned task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Drives `stream` in a task of its own, up to `ahead` items ahead of the consumer, and stops
/// after the first error. A panic while polling `stream` becomes the error `on_panic(message)`
/// (never a silent end of the stream). Dropping the returned stream aborts the task. Must be
/// called inside a tokio runtime.
pub fn spawn_ahead<T: Send + 'static, E: Send + 'static>(
    stream: BoxStream<'static, Result<T, E>>,
    ahead: usize,
    on_panic: impl Fn(String) -> E + Send + 'static,
) -> BoxStream<'static, Result<T, E>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ahead.max(1));
    let task = tokio::spawn(async move {
        let mut stream = stream;
        loop {
            let item = match AssertUnwindSafe(stream.next()).catch_unwind().await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(panic) => Err(on_panic(panic_message(panic.as_ref()))),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    futures::stream::unfold((rx, AbortOnDrop(task)), |(mut rx, task)| async move {
        rx.recv().await.map(|item| (item, (rx, task)))
    })
    .boxed()
}
