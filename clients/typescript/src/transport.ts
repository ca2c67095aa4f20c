// Transport: one HTTP request to the service and its reply read within
// bounds, with every failure classified by what it says about the request:
// never connected (nothing sent) → `unavailable`; sent or maybe sent →
// `indeterminate` (mirrors src/client/api.rs's send). Knows no verb.

import { IndeterminateError, UnavailableError, type LeaseholdError } from "./errors.js";
import { isObject, linked, type JsonObject } from "./internal.js";
import type { Attempt } from "./types.js";
import type { Reply } from "./wire.js";

const OWNER_TOKEN_HEADER = "Lease-Owner-Token";
const OPERATION_ID_HEADER = "Lease-Operation-Id";

/** What a transport needs to reach the service. */
export interface TransportOptions {
  /** The service's base URL, checked, without a trailing slash. */
  readonly baseUrl: string;
  readonly apiKey: string | undefined;
  /** Replies larger than this are refused (`indeterminate`, `unexpected_reply`). */
  readonly maxReplyBytes: number;
  readonly fetch: typeof globalThis.fetch;
}

/** One request. */
export interface CallSpec {
  readonly method: string;
  readonly url: string;
  /** The operation the errors name. */
  readonly op: string;
  readonly attempt?: Attempt | undefined;
  readonly body?: JsonObject | undefined;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  readonly headers?: Record<string, string>;
}

class Timeout extends Error {}

/** Error codes of a connection that was never made: nothing was sent. */
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
  "CERT_HAS_EXPIRED",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

function errorCode(e: unknown): string | undefined {
  if (isObjectLike(e) && typeof e["code"] === "string") return e["code"];
  return undefined;
}

function isObjectLike(e: unknown): e is Record<string, unknown> {
  return typeof e === "object" && e !== null;
}

/** Whether a fetch failure says no connection was made (so nothing was sent). */
export function neverConnected(e: unknown): boolean {
  const cause = isObjectLike(e) ? e["cause"] : undefined;
  // fetch refused the URL itself (a blocked port): nothing was sent.
  if (cause instanceof Error && cause.message === "bad port") return true;
  const code = errorCode(cause);
  if (code !== undefined) return CONNECT_CODES.has(code);
  // Happy eyeballs: every address refused.
  if (isObjectLike(cause) && Array.isArray(cause["errors"]) && cause["errors"].length > 0) {
    return cause["errors"].every((inner: unknown) => CONNECT_CODES.has(errorCode(inner) ?? ""));
  }
  return false;
}

/** Sends requests to one service; keeps no connection state of its own. */
export class Transport {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #maxReplyBytes: number;
  readonly #fetch: typeof globalThis.fetch;

  constructor(options: TransportOptions) {
    this.baseUrl = options.baseUrl;
    this.#apiKey = options.apiKey;
    this.#maxReplyBytes = options.maxReplyBytes;
    this.#fetch = options.fetch;
  }

  /**
   * Sends one request and reads its reply, classifying transport failures:
   * never connected: `unavailable`; sent (or possibly sent): `indeterminate`.
   */
  async call(spec: CallSpec): Promise<Reply> {
    if (spec.signal?.aborted) throw spec.signal.reason;
    const headers: Record<string, string> = { accept: "application/json", ...spec.headers };
    if (this.#apiKey !== undefined) headers["authorization"] = `Bearer ${this.#apiKey}`;
    if (spec.attempt !== undefined) {
      headers[OWNER_TOKEN_HEADER] = spec.attempt.ownerToken;
      headers[OPERATION_ID_HEADER] = spec.attempt.operationId;
    }
    if (spec.body !== undefined) headers["content-type"] = "application/json";
    const timeout = new AbortController();
    const { controller, dispose } = linked(spec.signal, timeout.signal);
    const timer = setTimeout(() => timeout.abort(new Timeout("timeout")), Math.max(0, spec.timeoutMs));
    const why = (e: unknown): LeaseholdError => {
      if (timeout.signal.aborted) return new IndeterminateError(spec.op, "timeout", undefined, { cause: e });
      if (spec.signal?.aborted) return new IndeterminateError(spec.op, "aborted", undefined, { cause: e });
      return new IndeterminateError(spec.op, "connection_lost", undefined, { cause: e });
    };
    try {
      let response: Response;
      try {
        response = await this.#fetch(spec.url, {
          method: spec.method,
          headers,
          body: spec.body === undefined ? null : JSON.stringify(spec.body),
          signal: controller.signal,
          redirect: "manual",
        });
      } catch (e) {
        if (!controller.signal.aborted && neverConnected(e)) {
          throw new UnavailableError("connect", undefined, { cause: e });
        }
        throw why(e);
      }
      let text: string;
      try {
        text = await readLimited(response, this.#maxReplyBytes);
      } catch (e) {
        if (e instanceof TooLarge) throw new IndeterminateError(spec.op, "unexpected_reply", response.status);
        throw why(e);
      }
      let body: JsonObject | undefined;
      try {
        const parsed: unknown = JSON.parse(text);
        body = isObject(parsed) ? parsed : undefined;
      } catch {
        body = undefined;
      }
      return { status: response.status, body, headers: response.headers };
    } finally {
      clearTimeout(timer);
      dispose();
    }
  }


  /**
   * Opens `url` as an event stream (`Last-Event-ID` when given). Rejects
   * with fetch's own error, for the caller to classify with `neverConnected`.
   */
  async openStream(
    url: string,
    lastEventId: string | undefined,
    signal: AbortSignal,
    extra: Record<string, string> = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { accept: "text/event-stream", ...extra };
    if (this.#apiKey !== undefined) headers["authorization"] = `Bearer ${this.#apiKey}`;
    if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
    return this.#fetch(url, { method: "GET", headers, signal, redirect: "manual" });
  }

  /** A response's body as a JSON object, or undefined (unreadable, too large, not an object). */
  async readJson(response: Response): Promise<JsonObject | undefined> {
    let text = "";
    try {
      text = await readLimited(response, this.#maxReplyBytes);
    } catch {
      // the status says enough
    }
    try {
      const parsed: unknown = JSON.parse(text);
      return isObject(parsed) ? parsed : undefined;
    } catch {
      return undefined;
    }
  }
}

class TooLarge extends Error {}

/** Reads a reply body as text, refusing more than `limit` bytes. */
async function readLimited(response: Response, limit: number): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw new TooLarge("reply too large");
      chunks.push(value);
    }
  } catch (e) {
    await reader.cancel().catch(() => undefined);
    throw e;
  }
  const all = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.byteLength;
  }
  return new TextDecoder().decode(all);
}
