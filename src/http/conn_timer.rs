//! One timer per connection (issue 25, docs/perf-log/2026-12-05.md "the
//! request path, a fourth pass"): hyper's header-read timeout and the front's
//! request timeout take turns on one tokio timer that stays registered
//! across requests. Each used to register a timer of its own per request
//! and remove it again (the timer wheel's lock, twice, and a box for
//! hyper's), about 2 000 instructions of an acquire.
//!
//! A user states the deadline it waits for (its [`Slot`]); the timer is
//! set only when a poll finds it unset, or set later than the earliest
//! deadline still wanted. A deadline given up (the head came, the answer
//! is ready) leaves the timer as it is: when it fires with nothing due,
//! the poll that sees it sets it again for the earliest deadline wanted.
//! On a busy connection that is about once per request timeout, however
//! many requests it carries. Deadlines are met as exactly as tokio's own
//! timers meet them.
//!
//! Every user of one connection's timer is polled by that connection's
//! task (hyper serves one request at a time on an HTTP/1.1 connection and
//! polls the service's future itself), so the one waker the tokio timer
//! keeps wakes whoever is due.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// Who waits on a connection's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// hyper, for a request head (`header_read_timeout`).
    Head = 0,
    /// The front, for the request's answer (the request timeout).
    Request = 1,
}

/// A connection's timer; clones share it.
#[derive(Clone, Default)]
pub struct ConnTimer(Arc<Mutex<Lazy>>);

#[derive(Default)]
struct Lazy {
    /// Made at the first poll (a tokio timer needs the runtime).
    sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline the timer is set to, until a poll sees it fire.
    armed: Option<Instant>,
    /// The latest deadline a poll has seen the timer reach.
    reached: Option<Instant>,
    /// Each slot's deadline and the generation of the [`ConnSleep`] that wants it.
    wants: [Option<(Instant, u64)>; 2],
    generation: u64,
    /// The waker the set timer was last polled with: polled again by the
    /// same task, it need only be asked whether it fired (tokio's own
    /// poll of a timer costs about 400 instructions).
    waker: Option<std::task::Waker>,
    /// The deadline of the head being read when hyper took the
    /// connection ([`ConnTimer::carry_head`]): hyper's first head timer
    /// ends there at the latest.
    carried: Option<Instant>,
}

impl ConnTimer {
    /// A connection's timer, unset.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lazy> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A future that resolves at `deadline`, for `slot`: it replaces what
    /// the slot waited for.
    pub fn sleep_until(&self, slot: Slot, deadline: Instant) -> ConnSleep {
        let mut lazy = self.lock();
        lazy.generation += 1;
        let generation = lazy.generation;
        lazy.wants[slot as usize] = Some((deadline, generation));
        ConnSleep {
            timer: self.clone(),
            slot,
            deadline,
            generation,
        }
    }

    /// One head deadline per connection, whichever path reads the head
    /// (issue 39 item 2): the first head hyper waits for on this
    /// connection must come by `deadline`, the deadline the accept loop or
    /// the keep-alive loop had already set for it, not a fresh idle
    /// timeout from when hyper starts reading.
    pub fn carry_head(&self, deadline: Instant) {
        self.lock().carried = Some(deadline);
    }

    /// hyper's head deadline: `deadline`, or the carried one if earlier
    /// (taken: it applies to one head).
    fn head_deadline(&self, deadline: Instant) -> Instant {
        self.lock()
            .carried
            .take()
            .map_or(deadline, |carried| carried.min(deadline))
    }

    /// Runs `future` until `deadline`: `Err(())` when the deadline came first.
    pub async fn within<F: Future>(
        &self,
        slot: Slot,
        deadline: Instant,
        future: F,
    ) -> Result<F::Output, ()> {
        let mut future = std::pin::pin!(future);
        let mut sleep = self.sleep_until(slot, deadline);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            Pin::new(&mut sleep).poll(cx).map(|()| Err(()))
        })
        .await
    }
}

impl Lazy {
    fn poll(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let reached = self.reached;
            if reached.is_some_and(|r| r >= deadline) {
                return Poll::Ready(());
            }
            // The earliest deadline not yet reached (this one at the latest).
            let next = self
                .wants
                .iter()
                .flatten()
                .map(|&(at, _)| at)
                .filter(|&at| reached.is_none_or(|r| at > r))
                .fold(deadline, Instant::min);
            let sleep = match (&mut self.sleep, self.armed) {
                (Some(sleep), Some(armed)) if armed <= next => {
                    let same_task = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
                    if same_task && !sleep.is_elapsed() {
                        return Poll::Pending;
                    }
                    sleep
                }
                (Some(sleep), _) => {
                    sleep.as_mut().reset(next);
                    self.armed = Some(next);
                    sleep
                }
                (None, _) => {
                    self.armed = Some(next);
                    self.sleep.insert(Box::pin(tokio::time::sleep_until(next)))
                }
            };
            match sleep.as_mut().poll(cx) {
                Poll::Pending => {
                    if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        self.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Poll::Ready(()) => self.reached = self.armed.take(),
            }
        }
    }
}

/// What [`ConnTimer::sleep_until`] gives: resolves at its deadline; when
/// dropped, its slot waits for nothing.
pub struct ConnSleep {
    timer: ConnTimer,
    slot: Slot,
    deadline: Instant,
    generation: u64,
}

impl Future for ConnSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.timer.lock().poll(self.deadline, cx)
    }
}

impl Drop for ConnSleep {
    fn drop(&mut self) {
        let mut lazy = self.timer.lock();
        let want = &mut lazy.wants[self.slot as usize];
        if want.is_some_and(|(_, generation)| generation == self.generation) {
            *want = None;
        }
    }
}

impl hyper::rt::Sleep for ConnSleep {}

/// hyper's timer on a connection: its only use is the header-read timeout.
impl hyper::rt::Timer for ConnTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let deadline = self.head_deadline(Instant::now() + duration);
        Box::pin(self.sleep_until(Slot::Head, deadline))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let deadline = self.head_deadline(Instant::from_std(deadline));
        Box::pin(ConnTimer::sleep_until(self, Slot::Head, deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn each_slot_fires_at_its_own_deadline() {
        let timer = ConnTimer::new();
        let start = Instant::now();
        // The head waits long; a request's shorter deadline comes first.
        let head = timer.sleep_until(Slot::Head, start + Duration::from_secs(75));
        let answered = timer
            .within(Slot::Request, start + Duration::from_secs(34), async {
                tokio::time::sleep(Duration::from_secs(1)).await;
            })
            .await;
        assert_eq!(answered, Ok(()));
        let late = timer
            .within(
                Slot::Request,
                Instant::now() + Duration::from_secs(34),
                std::future::pending::<()>(),
            )
            .await;
        assert_eq!(late, Err(()));
        assert_eq!(Instant::now() - start, Duration::from_secs(35));
        head.await;
        assert_eq!(Instant::now() - start, Duration::from_secs(75));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_set_early_is_set_again_for_what_is_still_wanted() {
        let timer = ConnTimer::new();
        let start = Instant::now();
        // Sets the timer for 10 s, then gives that up.
        let first = timer.sleep_until(Slot::Request, start + Duration::from_secs(10));
        let mut first = Box::pin(first);
        let polled = std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
        drop(first);
        // A later deadline does not move the timer; it still fires at 20 s.
        timer
            .sleep_until(Slot::Head, start + Duration::from_secs(20))
            .await;
        assert_eq!(Instant::now() - start, Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn hyper_s_first_head_ends_at_the_carried_deadline() {
        use hyper::rt::Timer as _;
        let timer = ConnTimer::new();
        let start = Instant::now();
        timer.carry_head(start + Duration::from_secs(3));
        // hyper asks for its own idle timeout: the carried deadline wins.
        hyper::rt::Timer::sleep(&timer, Duration::from_secs(10)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
        // It applied to one head: the next gets hyper's whole timeout.
        timer.sleep(Duration::from_secs(10)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_sleep_leaves_its_successor_wanted() {
        let timer = ConnTimer::new();
        let start = Instant::now();
        let old = timer.sleep_until(Slot::Head, start + Duration::from_secs(5));
        let new = timer.sleep_until(Slot::Head, start + Duration::from_secs(7));
        drop(old);
        assert!(timer.lock().wants[Slot::Head as usize].is_some());
        new.await;
        assert_eq!(Instant::now() - start, Duration::from_secs(7));
    }
}
