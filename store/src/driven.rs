//! [`Driven`]: the receiving end of a bounded channel whose producer runs in
//! the receiver's own task.
//!
//! A query's producer (a scan following continuation tokens, the native
//! path turning pages into record batches) used to be a spawned task: each
//! page then crossed tasks, and usually threads, through a futex wake-up,
//! which cost more than reading a 100-row range. Here the producer future is
//! polled by [`Driven::recv`] itself, before the channel: it runs until the
//! channel is full (so it stays at most the channel's capacity ahead) or it
//! waits for something else (the blocking pool, a retry back-off, pages of
//! segments that do run as their own tasks). Nothing runs while nobody
//! reads, which is the back-pressure a cursor wants.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A channel receiver, optionally with the producer that fills it.
pub struct Driven<T> {
    rx: mpsc::Receiver<T>,
    work: Option<Work>,
}

impl<T> std::fmt::Debug for Driven<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driven")
            .field("producing", &self.work.is_some())
            .finish()
    }
}

impl<T> Driven<T> {
    /// `rx` filled by `work`, which runs inside [`Driven::recv`]. `work`
    /// must drop its sender when it ends, or `recv` never returns `None`.
    pub fn new(rx: mpsc::Receiver<T>, work: impl Future<Output = ()> + Send + 'static) -> Self {
        Driven {
            rx,
            work: Some(Box::pin(work)),
        }
    }

    /// `rx` filled by tasks of its own.
    pub fn spawned(rx: mpsc::Receiver<T>) -> Self {
        Driven { rx, work: None }
    }

    /// The next item; `None` once the producer is done and everything it
    /// sent was received.
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| {
            if let Some(work) = self.work.as_mut()
                && work.as_mut().poll(cx).is_ready()
            {
                self.work = None;
            }
            self.rx.poll_recv(cx)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_producer_of_more_items_than_the_channel_holds_runs_to_its_end() {
        let (tx, rx) = mpsc::channel(2);
        let mut d = Driven::new(rx, async move {
            for i in 0..10 {
                if tx.send(i).await.is_err() {
                    return;
                }
            }
        });
        let mut got = Vec::new();
        while let Some(i) = d.recv().await {
            got.push(i);
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn the_producer_waits_for_the_reader() {
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel(2);
        let counter = sent.clone();
        let mut d = Driven::new(rx, async move {
            for i in 0..100 {
                if tx.send(i).await.is_err() {
                    return;
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        assert_eq!(d.recv().await, Some(0));
        // One received, the channel's two slots filled, nothing more.
        assert!(sent.load(std::sync::atomic::Ordering::SeqCst) <= 3);
        drop(d);
    }

    #[tokio::test]
    async fn a_producer_that_waits_elsewhere_is_woken() {
        let (tx, rx) = mpsc::channel(1);
        let mut d = Driven::new(rx, async move {
            let v = tokio::task::spawn_blocking(|| 7).await.unwrap_or(0);
            let _ = tx.send(v).await;
        });
        assert_eq!(d.recv().await, Some(7));
        assert_eq!(d.recv().await, None);
    }
}
