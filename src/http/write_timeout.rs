//! [`WriteTimeout`]: a connection whose writes make no progress for a while
//! is closed. Without it a client that stops reading (an event-stream
//! watcher that never reads, a stalled peer) holds its connection, its
//! watcher slot and its buffers for ever: the kernel's send buffer fills,
//! hyper's write stays pending, and nothing else ever wakes the task.
//!
//! Every write, flush or shutdown that returns `Pending` arms a timer
//! polled with the same waker; any progress disarms it. When it fires, the
//! next poll answers `TimedOut` and hyper closes the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::future::Future as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

/// A stream whose pending writes time out after `limit`.
pub struct WriteTimeout<S> {
    inner: S,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteTimeout<S> {
    /// Wraps `inner`: a write pending for `limit` fails with `TimedOut`.
    pub fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: None,
        }
    }

    /// After a write-side poll: disarm on progress; on `Pending`, arm the
    /// timer (once) and fail when it has fired.
    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.timer = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self.timer.get_or_insert_with(|| Box::pin(sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.check(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_times_the_write_out() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut ours = WriteTimeout::new(ours, Duration::from_secs(5));
        // Fills the 64-byte pipe; then nothing is read for 5 s.
        let started = tokio::time::Instant::now();
        let err = loop {
            if let Err(e) = ours.write_all(&[b'x'; 32]).await {
                break e;
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
        assert!(started.elapsed() < Duration::from_secs(6));
        // Reading still works; a peer that reads keeps the connection.
        let mut got = [0u8; 64];
        assert_eq!(theirs.read(&mut got).await.expect("read"), 64);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_disarms_the_timer() {
        let (ours, mut theirs) = tokio::io::duplex(16);
        let mut ours = WriteTimeout::new(ours, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut total = 0;
            let mut buf = [0u8; 16];
            while total < 160 {
                // A slow reader: 16 bytes every 4 s, within the limit each time.
                tokio::time::sleep(Duration::from_secs(4)).await;
                total += theirs.read(&mut buf).await.expect("read");
            }
        });
        ours.write_all(&[b'y'; 160])
            .await
            .expect("slow but steady reads keep it open");
        reader.await.expect("reader");
    }
}
