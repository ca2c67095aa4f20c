// A text/event-stream parser over a fetch body (WHATWG HTML "server-sent
// events" interpretation), so watch works wherever fetch streams do.

/** One dispatched event. `data` lines are joined with "\n". */
export interface EventMessage {
  readonly event: string | undefined;
  readonly id: string | undefined;
  readonly data: string;
  readonly retry: number | undefined;
}

/** Yields the events of `stream` until it ends; releases the stream when left early. */
export async function* parseEventStream(stream: ReadableStream<Uint8Array>): AsyncGenerator<EventMessage, void, undefined> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event: string | undefined;
  let id: string | undefined;
  let retry: number | undefined;
  let data: string[] = [];
  let first = true;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return; // an incomplete event at the end is dropped, as the spec says
      buffer += decoder.decode(value, { stream: true });
      if (first && buffer.length > 0) {
        if (buffer.charCodeAt(0) === 0xfeff) buffer = buffer.slice(1);
        first = false;
      }
      for (;;) {
        const cr = buffer.indexOf("\r");
        const lf = buffer.indexOf("\n");
        let end: number;
        let next: number;
        if (cr === -1 && lf === -1) break;
        if (cr !== -1 && (lf === -1 || cr < lf)) {
          // A lone CR at the end of the buffer may be the first half of CRLF.
          if (cr === buffer.length - 1) break;
          end = cr;
          next = buffer[cr + 1] === "\n" ? cr + 2 : cr + 1;
        } else {
          end = lf;
          next = lf + 1;
        }
        const line = buffer.slice(0, end);
        buffer = buffer.slice(next);
        if (line === "") {
          if (data.length > 0 || event !== undefined) {
            yield { event, id, data: data.join("\n"), retry };
          }
          event = undefined;
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a comment (keepalive)
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        let value2 = colon === -1 ? "" : line.slice(colon + 1);
        if (value2.startsWith(" ")) value2 = value2.slice(1);
        switch (field) {
          case "event":
            event = value2;
            break;
          case "data":
            data.push(value2);
            break;
          case "id":
            if (!value2.includes("\0")) id = value2;
            break;
          case "retry":
            if (/^\d+$/.test(value2)) retry = Number(value2);
            break;
        }
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
