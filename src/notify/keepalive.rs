//! [`Ticker`]: one keep-alive timer for every event stream of an instance.
//!
//! An idle stream writes a comment line at least every keep-alive period.
//! With a timer per stream, 10 000 idle streams hold 10 000 timers (a
//! boxed timer entry each) that fire 10 000 times a period; with this one,
//! a single timer ticks and every stream, waiting on the same channel,
//! writes its comment on the tick.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// The shared tick: a counter that goes up every period while anyone
/// holds a receiver.
#[derive(Default)]
pub struct Ticker {
    sender: Mutex<Option<watch::Sender<u64>>>,
}

impl Ticker {
    fn sender(&self) -> MutexGuard<'_, Option<watch::Sender<u64>>> {
        self.sender.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes every `period` (the period of the caller
    /// that started the timer; an instance has one). The first caller
    /// starts the timer; it stops at `shutdown` or once nobody holds a
    /// receiver, and the next caller starts it again.
    pub fn subscribe(
        self: &Arc<Self>,
        period: Duration,
        shutdown: &CancellationToken,
    ) -> watch::Receiver<u64> {
        let mut sender = self.sender();
        if let Some(tx) = sender.as_ref() {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(0);
        *sender = Some(tx.clone());
        drop(sender);
        let (ticker, shutdown) = (Arc::clone(self), shutdown.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(Instant::now() + period, period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                // Checked under the lock `subscribe` takes: a receiver
                // taken meanwhile is never left without ticks.
                let mut sender = ticker.sender();
                if tx.is_closed() {
                    *sender = None;
                    return;
                }
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
            *ticker.sender() = None;
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Time is paused: the runtime jumps to the next timer once every task
    /// waits, so each `changed()` returns at the tick, never by a sleep.
    #[tokio::test(start_paused = true)]
    async fn one_timer_ticks_every_subscriber_and_any_later_one() {
        let (ticker, shutdown) = (Arc::new(Ticker::default()), CancellationToken::new());
        let period = Duration::from_secs(15);
        let start = Instant::now();
        let (mut a, mut b) = (
            ticker.subscribe(period, &shutdown),
            ticker.subscribe(period, &shutdown),
        );
        a.changed().await.expect("a tick");
        b.changed().await.expect("the same tick");
        assert_eq!(start.elapsed(), period, "the first tick one period in");
        a.changed().await.expect("the next tick");
        assert_eq!(start.elapsed(), 2 * period);
        drop((a, b));
        // Nobody listened for a moment: a new subscriber still gets ticks,
        // whether the old timer has noticed yet or a new one starts.
        let mut c = ticker.subscribe(period, &shutdown);
        c.changed().await.expect("a tick after the others left");
        drop(c);
        for _ in 0..3 {
            let mut d = ticker.subscribe(period, &shutdown);
            d.changed().await.expect("ticks for every new subscriber");
        }
        let mut c = ticker.subscribe(period, &shutdown);
        c.changed().await.expect("a tick");
        shutdown.cancel();
        assert!(c.changed().await.is_err(), "the timer ends at shutdown");
    }
}
