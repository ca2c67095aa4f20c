//! Following a purpose's event stream (`GET /leases/{purpose}/events`,
//! docs/watching.md "Watching a purpose"): [`Client::watch_purpose`] opens
//! it (resuming after an id when given), [`PurposeStream::next`] reads one
//! server-sent event at a time.

use super::api::Client;
use super::error::{Cause, Error};
use crate::domain::{OperationId, Purpose};

/// One server-sent event: its name, its id (not every event has one) and
/// its `data` (JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// `snapshot`, `snapshot_end`, `reset`, or a change (`acquired`, …).
    pub event: String,
    /// Where the stream stands after it; send it back to resume.
    pub id: Option<String>,
    /// The event's data.
    pub data: String,
}

/// An open purpose stream.
pub struct PurposeStream {
    response: reqwest::Response,
    buf: String,
    op: OperationId,
}

impl Client {
    /// Opens `purpose`'s stream; with `last_event_id`, after that event
    /// (or, when the service no longer keeps it, with `reset` and a fresh
    /// snapshot).
    pub async fn watch_purpose(
        &self,
        purpose: &Purpose,
        last_event_id: Option<&str>,
    ) -> Result<PurposeStream, Error> {
        let op = OperationId::parse("watch").map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        let url = self.purpose_events_url(purpose);
        let headers: Vec<(&str, &str)> = last_event_id
            .map(|id| ("Last-Event-ID", id))
            .into_iter()
            .collect();
        let response = self.open_stream(url, &headers, &op).await?;
        if response.status() != reqwest::StatusCode::OK {
            let reply = self.read_reply(response, &op).await?;
            return Err(reply.failure(&op));
        }
        Ok(PurposeStream {
            response,
            buf: String::new(),
            op,
        })
    }
}

impl PurposeStream {
    /// Reads the events of an open stream's answer (any `text/event-stream`).
    pub(super) fn from_response(response: reqwest::Response, op: OperationId) -> Self {
        Self {
            response,
            buf: String::new(),
            op,
        }
    }

    /// The next event (comment lines skipped); `None` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, Error> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if let Some(event) = parse(&block) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => match std::str::from_utf8(&chunk) {
                    Ok(text) => self.buf.push_str(text),
                    Err(_) => return Err(self.lost()),
                },
                Ok(None) => return Ok(None),
                Err(_) => return Err(self.lost()),
            }
        }
    }

    fn lost(&self) -> Error {
        Error::Indeterminate {
            operation_id: self.op.clone(),
            cause: Cause::ConnectionLost,
        }
    }
}

/// One event block; `None` for a comment.
fn parse(block: &str) -> Option<StreamEvent> {
    let mut event = StreamEvent {
        event: String::new(),
        id: None,
        data: String::new(),
    };
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event: ") {
            event.event = v.to_owned();
        } else if let Some(v) = line.strip_prefix("id: ") {
            event.id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            event.data = v.to_owned();
        }
    }
    (!event.event.is_empty()).then_some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_to_events_and_comments_to_nothing() {
        assert_eq!(parse(": keepalive\n\n"), None);
        assert_eq!(
            parse("event: snapshot_end\nid: 0a0b0c0d-3\ndata: {\"leases\":0}\n\n"),
            Some(StreamEvent {
                event: "snapshot_end".into(),
                id: Some("0a0b0c0d-3".into()),
                data: "{\"leases\":0}".into(),
            })
        );
    }
}
