// Session: one liveness for many leases (docs/design.md §18, §19; mirrors
// src/client/session*.rs). Made with an attempt (its owner token is the
// session's secret; a create without certain reply is sent again with the
// same attempt and finds the same session), kept alive by the keep-alive
// stream (if this process dies the connection closes and the service ends
// the session at once), by PATCH every third of the validity left when the
// stream cannot be opened or drops. Leases acquired on it are `Lease`
// handles (own fencing token, own `signal`) whose validity is the
// session's: every session renewal extends them, the session's end ends
// them. Validity follows §5: from the instant a renewal was *sent*; a
// stream renewal is timed by the service, so it counts from when the
// previous event (or the request opening the stream) arrived.

import "./dispose.js";
import { IndeterminateError, RefusedLocallyError, type LeaseholdError } from "./errors.js";
import { isObject, now, operationId as newOperationId, pause, type JsonObject } from "./internal.js";
import { Lease, type LeaseCalls } from "./lease.js";
import { HandleCore, type LeaseState } from "./machine.js";
import { DIGEST, PURPOSE } from "./resource.js";
import {
  isGone,
  lostMap,
  releaseAnswer,
  renewalOf,
  sessionIdOf,
  sessionInfoOf,
  type KeepAliveMode,
  type LostLease,
  type SessionAcquireOptions,
  type SessionAcquireResult,
  type SessionEndReason,
  type SessionEndResult,
  type SessionGoneReason,
  type SessionInfo,
  type SessionOptions,
  type SessionRenewResult,
} from "./session_wire.js";
import { parseEventStream } from "./sse.js";
import type { Transport } from "./transport.js";
import type { Attempt, CallOptions, LeaseRecord, ReleaseResult, RenewResult, Resource } from "./types.js";
import { failure, leaseRecord, localInvalid, num, outcomeOf, required, str, unexpected, type Reply } from "./wire.js";

/** The shortest pause between two renew attempts. */
const MIN_PAUSE_MS = 5;

/** What a session needs of the client that made it. */
export interface SessionClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  driftBudgetFor(ttlMs: number): number;
  attempt(operationId?: string, options?: CallOptions): Promise<Attempt>;
}

/** A renewal being applied to every lease: each lease's renew reads it. */
interface Applying {
  readonly sentAt: number;
  readonly remainingMs: number;
  readonly lost: ReadonlyMap<string, string>;
}

/**
 * A live session; see the module comment. `signal` aborts once when the
 * session is lost (not when this process ends it); each lease's own
 * `signal` aborts once when that lease stops protecting the work.
 * `await using` ends it.
 */
export class Session implements AsyncDisposable {
  readonly id: string;
  readonly ttlMs: number;
  readonly keepAlive: KeepAliveMode;
  readonly #client: SessionClient;
  readonly #transport: Transport;
  readonly #attempt: Attempt;
  readonly #core: HandleCore;
  readonly #marginMs: number;
  readonly #lost = new AbortController();
  readonly #stop = new AbortController();
  readonly #leases = new Set<Lease>();
  readonly #renewedListeners = new Set<() => void>();
  #info: SessionInfo;
  #endReason: SessionEndReason | undefined;
  #ending = false;
  #applying: Applying | undefined;
  #settling: "released" | "indeterminate" | undefined;
  #renewals = 0;
  #streaming = false;
  #wake = new AbortController();

  /** @internal Made by `Client.session`. */
  constructor(client: SessionClient, transport: Transport, attempt: Attempt, info: SessionInfo, sentAt: number, options: SessionOptions) {
    this.#client = client;
    this.#transport = transport;
    this.#attempt = attempt;
    this.id = info.id;
    this.ttlMs = options.ttlMs;
    this.keepAlive = options.keepAlive ?? "stream";
    this.#info = info;
    const drift = client.driftBudgetFor(this.ttlMs);
    this.#core = new HandleCore(sentAt, this.ttlMs, info.remainingMs, drift);
    this.#marginMs = Math.min(Math.max(drift, options.marginMs ?? this.ttlMs / 10), this.ttlMs / 2);
    this.#keep();
  }

  /** @internal `POST /sessions`, a create without certain reply sent again with the same attempt. */
  static async create(client: SessionClient, transport: Transport, options: SessionOptions): Promise<Session> {
    const attempt = options.attempt ?? (await client.attempt(newOperationId("session"), options));
    const body: JsonObject = { ttlMs: options.ttlMs };
    if (options.holder !== undefined) body["holder"] = options.holder;
    const op = attempt.operationId;
    const retries = options.createRetries ?? 3;
    for (let tries = 0; ; tries++) {
      const sentAt = now();
      try {
        const reply = await transport.call({
          method: "POST",
          url: `${client.baseUrl}/sessions`,
          op,
          attempt,
          body,
          timeoutMs: options.timeoutMs ?? client.timeoutMs,
          signal: options.signal,
        });
        const outcome = outcomeOf(reply);
        if (outcome !== "session_created" && outcome !== "replayed_same_operation") throw failure(reply, op);
        const info = sessionInfoOf(reply.body?.["session"]);
        if (info === undefined || info.id !== sessionIdOf(attempt.ownerToken)) throw unexpected(reply, op);
        return new Session(client, transport, attempt, info, sentAt, options);
      } catch (e) {
        if (!(e instanceof IndeterminateError) || tries >= retries || options.signal?.aborted) throw e;
        await pause(50 * 2 ** (tries + 1), options.signal);
      }
    }
  }

  /** Aborted once (with the end reason) when the session is lost. */
  get signal(): AbortSignal {
    return this.#lost.signal;
  }

  get endReason(): SessionEndReason | undefined {
    return this.#endReason;
  }

  get operationId(): string {
    return this.#attempt.operationId;
  }

  /** The session as the last answer or event showed it. */
  get info(): SessionInfo {
    return this.#info;
  }

  /** `active` while locally valid; `lost`, `released` (ended here) or `unknown`. */
  get state(): LeaseState {
    return this.#core.observe(now());
  }

  get validUntil(): number {
    return this.#core.validUntil;
  }

  /** How many renewals have been applied. */
  get renewals(): number {
    return this.#renewals;
  }

  /** Resolves once `count` renewals have been applied (false if the session ends first). */
  untilRenewals(count: number): Promise<boolean> {
    return new Promise((resolve) => {
      const check = (): void => {
        if (this.#renewals >= count || this.#endReason !== undefined) {
          this.#renewedListeners.delete(check);
          resolve(this.#renewals >= count);
        }
      };
      this.#renewedListeners.add(check);
      check();
    });
  }

  /** The leases attached now. */
  get leases(): Lease[] {
    return [...this.#leases];
  }

  #url(): string {
    return `${this.#client.baseUrl}/sessions/${this.id}`;
  }

  #leaseUrl(resource: Resource): string {
    if (!PURPOSE.test(resource.purpose) || !DIGEST.test(resource.digest)) {
      throw localInvalid([{ field: "resource", message: "purpose or digest malformed (use resourceOf)" }]);
    }
    return `${this.#url()}/leases/${resource.purpose}/${resource.digest}`;
  }

  /**
   * `PUT /sessions/{id}/leases/{purpose}/{digest}` with the session's secret
   * and a lease operation id of its own: the lease has no TTL of its own and
   * ends with the session. Refused locally once the session ended.
   */
  async acquire(resource: Resource, options: SessionAcquireOptions = {}): Promise<SessionAcquireResult> {
    const refused = this.#core.beginRenew(now());
    if (refused !== null) throw new RefusedLocallyError(refused);
    const url = this.#leaseUrl(resource);
    const body: JsonObject = {};
    const waitMs = options.waitMs ?? 0;
    if (waitMs > 0) body["waitMs"] = waitMs;
    if (options.holder !== undefined) body["holder"] = options.holder;
    if (options.limit !== undefined && options.limit !== 1) body["limit"] = options.limit;
    if (options.mode === "shared") body["mode"] = "shared";
    if (options.lockDelayMs !== undefined && options.lockDelayMs > 0) body["lockDelayMs"] = options.lockDelayMs;
    if (options.maxHoldMs !== undefined) body["maxHoldMs"] = options.maxHoldMs;
    const attempt: Attempt = { ownerToken: this.#attempt.ownerToken, operationId: options.operationId ?? newOperationId("lease") };
    const op = attempt.operationId;
    const sentAt = now();
    const reply = await this.#transport.call({
      method: "PUT",
      url,
      op,
      attempt,
      body,
      timeoutMs: (options.timeoutMs ?? this.#client.timeoutMs) + waitMs,
      signal: options.signal,
    });
    const outcome = outcomeOf(reply);
    const b = reply.body ?? {};
    switch (outcome) {
      case "acquired":
      case "replayed_same_operation": {
        const lease = leaseRecord(reply, resource, op);
        const waitedMs = outcome === "acquired" ? num(b["waitedMs"]) : undefined;
        const handle = this.#attach(resource, attempt, lease, sentAt + (waitedMs ?? 0), outcome);
        if (outcome === "replayed_same_operation") return { outcome, lease, handle };
        return waitedMs === undefined ? { outcome, lease, handle } : { outcome, lease, handle, waitedMs };
      }
      case "owner_operation_conflict":
        return { outcome, retryAfterMs: required(num(b["retryAfterMs"]), reply, op) };
      case "contended": {
        const retryAfterMs = required(num(b["retryAfterMs"]), reply, op);
        const waitedMs = num(b["waitedMs"]);
        const reason = str(b["reason"]);
        if (reason !== undefined && reason !== "lock_delay" && reason !== "queued") throw unexpected(reply, op);
        return { outcome, retryAfterMs, ...(waitedMs === undefined ? {} : { waitedMs }), ...(reason === undefined ? {} : { reason }) };
      }
      case "limit_mismatch":
        return { outcome, limit: required(num(b["limit"]), reply, op) };
      case "session_full":
        return { outcome };
      case "lost": {
        const reason = b["reason"];
        if (!isGone(reason)) throw unexpected(reply, op);
        this.#finish(reason);
        return { outcome, reason };
      }
      default:
        throw failure(reply, op);
    }
  }

  #attach(resource: Resource, attempt: Attempt, record: LeaseRecord, sentAt: number, by: "acquired" | "replayed_same_operation"): Lease {
    const calls: LeaseCalls = {
      timeoutMs: this.#client.timeoutMs,
      driftBudgetFor: (ttlMs) => this.#client.driftBudgetFor(ttlMs),
      renew: (r) => this.#leaseRenew(r, record),
      release: (r, a, options) => this.#leaseRelease(r, a, options),
    };
    const lease = new Lease(calls, resource, attempt, record, sentAt, this.ttlMs, { marginMs: this.#marginMs }, by);
    if (this.#endReason === undefined) {
      this.#leases.add(lease);
      lease.signal.addEventListener("abort", () => this.#leases.delete(lease), { once: true });
    } else {
      this.#settle(lease, this.#endReason);
    }
    return lease;
  }

  /**
   * A lease's renew: while a session renewal is being applied, its answer
   * for this lease (remainingMs less the time since the renewal's send, so
   * the lease's validity counts from that send); called by hand, it renews
   * the whole session first.
   */
  async #leaseRenew(resource: Resource, record: LeaseRecord): Promise<RenewResult> {
    let applying = this.#applying;
    if (applying === undefined) {
      const sentAt = now();
      const renewed = await this.renew();
      if (renewed.outcome === "lost") return { outcome: "lost", reason: renewed.reason };
      applying = { sentAt, remainingMs: renewed.session.remainingMs, lost: lostMap(renewed.lost) };
    }
    const reason = applying.lost.get(`${resource.purpose}/${resource.digest}`);
    if (reason !== undefined) return { outcome: "lost", reason };
    return { outcome: "renewed", lease: { ...record, remainingMs: Math.max(0, applying.remainingMs - (now() - applying.sentAt)) } };
  }

  /** A lease's release: settled locally at the session's end, else `DELETE /sessions/{id}/leases/…`. */
  async #leaseRelease(resource: Resource, attempt: Attempt, options: CallOptions = {}): Promise<ReleaseResult> {
    if (this.#settling === "released") return { outcome: "released" };
    if (this.#settling === "indeterminate") throw new IndeterminateError(this.operationId, "service");
    const op = attempt.operationId;
    const reply = await this.#transport.call({
      method: "DELETE",
      url: this.#leaseUrl(resource),
      op,
      attempt,
      timeoutMs: options.timeoutMs ?? this.#client.timeoutMs,
      signal: options.signal,
    });
    return releaseAnswer(reply, op);
  }

  /**
   * `PATCH /sessions/{id}`: renews the session and every attached lease in one
   * call; `renewed` extends local validity from this call's send; leases in
   * `lost` end; `lost` ends the session. A failure changes nothing (the next
   * renew tells). Refused locally once the session ended.
   */
  renew(options: CallOptions = {}): Promise<SessionRenewResult> {
    return this.#renew(options.timeoutMs ?? this.#client.timeoutMs, options.signal);
  }

  async #renew(timeoutMs: number, signal?: AbortSignal): Promise<SessionRenewResult> {
    const refused = this.#core.beginRenew(now());
    if (refused !== null) {
      this.#observe();
      throw new RefusedLocallyError(refused);
    }
    const op = this.operationId;
    const sentAt = now();
    const reply = await this.#transport.call({ method: "PATCH", url: this.#url(), op, attempt: this.#attempt, body: {}, timeoutMs, signal });
    if (reply.status === 200 && outcomeOf(reply) === "renewed") {
      const renewal = renewalOf(reply.body);
      if (renewal === undefined || renewal.session.id !== this.id) throw unexpected(reply, op);
      this.#apply(sentAt, renewal.session, renewal.lost);
      return { outcome: "renewed", ...renewal };
    }
    if (reply.status === 404 && outcomeOf(reply) === "lost") {
      const reason = reply.body?.["reason"];
      if (!isGone(reason)) throw unexpected(reply, op);
      this.#finish(reason);
      return { outcome: "lost", reason };
    }
    throw failure(reply, op);
  }

  /**
   * `DELETE /sessions/{id}`: ends it; the service releases every attached
   * lease, and each handle becomes `released`. An uncertain answer makes the
   * session and its leases `unknown`.
   */
  async end(options: CallOptions = {}): Promise<SessionEndResult> {
    const op = this.operationId;
    this.#ending = true;
    let reply: Reply;
    try {
      reply = await this.#transport.call({
        method: "DELETE",
        url: this.#url(),
        op,
        attempt: this.#attempt,
        timeoutMs: options.timeoutMs ?? this.#client.timeoutMs,
        signal: options.signal,
      });
    } catch (e) {
      if (e instanceof IndeterminateError) this.#finish("unknown");
      else this.#ending = false;
      throw e;
    }
    let result: SessionEndResult;
    const outcome = outcomeOf(reply);
    if (outcome === "ended") result = { outcome, released: num(reply.body?.["released"]) ?? 0 };
    else if (outcome === "already_absent") result = { outcome };
    else {
      const error: LeaseholdError = failure(reply, op);
      if (error instanceof IndeterminateError) this.#finish("unknown");
      else this.#ending = false;
      throw error;
    }
    this.#finish("ended");
    return result;
  }

  /** Stops keeping it alive without ending it: with the stream, the service ends it at once; else at its TTL. */
  close(): void {
    this.#finish("closed");
  }

  /** Ends the session unless it ended already; errors are swallowed. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#endReason === undefined) {
      try {
        await this.end();
      } catch {
        // Not applied or unknown: it ends at its TTL.
      }
    }
    this.close();
  }

  #observe(): void {
    const t = now();
    if (this.#core.observe(t) !== "active" && this.#endReason === undefined) this.#finish("expired");
  }

  #apply(sentAt: number, info: SessionInfo, lost: readonly LostLease[]): void {
    const state = this.#core.finishRenew(now(), sentAt, { kind: "renewed", remainingMs: info.remainingMs });
    this.#info = info;
    if (state !== "active") {
      this.#finish("expired");
      return;
    }
    this.#applying = { sentAt, remainingMs: info.remainingMs, lost: lostMap(lost) };
    try {
      for (const lease of [...this.#leases]) {
        // Settled synchronously from `#applying`; its promise only reports.
        lease.renew().catch(() => undefined);
      }
    } finally {
      this.#applying = undefined;
    }
    this.#renewals += 1;
    for (const listener of [...this.#renewedListeners]) listener();
  }

  /** The session's end, once: the session and every lease settled, then `signal` aborted (unless ended here). */
  #finish(reason: SessionEndReason): void {
    if (this.#endReason !== undefined) return;
    this.#endReason = reason;
    const t = now();
    if (reason === "ended") this.#core.finishRelease(t, "released");
    else if (reason === "unknown") this.#core.finishRelease(t, "indeterminate");
    else if (reason !== "closed") this.#core.finishRenew(t, t, { kind: "lost" });
    this.#stop.abort();
    for (const lease of [...this.#leases]) this.#settle(lease, reason);
    this.#leases.clear();
    if (reason !== "ended") this.#lost.abort(reason);
    for (const listener of [...this.#renewedListeners]) listener();
  }

  #settle(lease: Lease, reason: SessionEndReason): void {
    if (reason === "closed") return; // nothing renews it: its own validity runs out
    if (reason === "ended" || reason === "unknown") {
      this.#settling = reason === "ended" ? "released" : "indeterminate";
      try {
        lease.release().catch(() => undefined);
      } finally {
        this.#settling = undefined;
      }
      return;
    }
    const applying: Applying = { sentAt: now(), remainingMs: 0, lost: new Map([[`${lease.resource.purpose}/${lease.resource.digest}`, reason]]) };
    this.#applying = applying;
    try {
      lease.renew().catch(() => undefined);
    } finally {
      this.#applying = undefined;
    }
  }

  #stopAt(): number {
    return this.#core.validUntil - this.#marginMs;
  }

  #live(): boolean {
    return this.#endReason === undefined && !this.#ending;
  }

  #nextRenew(t: number): number {
    return t + Math.max(MIN_PAUSE_MS, ((this.#stopAt() - t) / 3) * (0.8 + 0.2 * Math.random()));
  }

  /** Starts the keep-alive: the renewer always, the stream follower in `stream` mode. */
  #keep(): void {
    void this.#renewer().catch(() => this.#finish("expired"));
    if (this.keepAlive === "stream") void this.#streamer().catch(() => undefined);
  }

  #setStreaming(on: boolean): void {
    this.#streaming = on;
    this.#wake.abort();
    this.#wake = new AbortController();
  }

  /**
   * Ends the session when its validity is about to run out, and renews by
   * PATCH: every third of the validity left while no stream is open (`renew`
   * mode, or the stream is awaited, cannot be opened or dropped); with an
   * open stream only when its renewals stop coming (less than half the TTL
   * left). A slow stream is never given up: its close would end the session.
   */
  async #renewer(): Promise<void> {
    let renewAt: number | undefined;
    while (this.#live()) {
      const t = now();
      const stopAt = this.#stopAt();
      if (t >= stopAt) {
        this.#finish("expired");
        return;
      }
      if (this.keepAlive === "manual") {
        await pause(stopAt - t + 1, this.#stop.signal);
        continue;
      }
      let due: number;
      if (this.#streaming) {
        due = this.#core.validUntil - this.ttlMs / 2;
        renewAt = undefined;
      } else {
        renewAt ??= this.#nextRenew(t);
        due = renewAt;
      }
      if (t < due) {
        await pause(Math.min(due, stopAt) - t, this.#stop.signal, this.#wake.signal);
        continue;
      }
      renewAt = undefined;
      try {
        await this.#renew(Math.max(1, Math.min(this.#client.timeoutMs, stopAt - t)), this.#stop.signal);
      } catch (e) {
        if (e instanceof RefusedLocallyError) return;
        renewAt = this.#nextRenew(now());
      }
    }
  }

  /** Follows the keep-alive stream, opening it again a third of the TTL later when it cannot be opened or drops. */
  async #streamer(): Promise<void> {
    while (this.#live()) {
      const followed = await this.#follow();
      if (followed === "over" || followed === "unsupported") return;
      await pause(this.ttlMs / 3, this.#stop.signal);
    }
  }

  /** Follows the keep-alive stream: `over`, `dropped`, `unsupported` or `failed` (not opened). */
  async #follow(): Promise<"over" | "dropped" | "unsupported" | "failed"> {
    const abort = new AbortController();
    const onStop = (): void => abort.abort();
    this.#stop.signal.addEventListener("abort", onStop, { once: true });
    let opened = false;
    try {
      let mark = now();
      let response: Response;
      try {
        response = await this.#transport.openStream(`${this.#url()}/keepalive`, undefined, abort.signal, {
          "Lease-Owner-Token": this.#attempt.ownerToken,
        });
      } catch {
        return this.#live() ? "failed" : "over";
      }
      if (response.status !== 200 || response.body === null) {
        const body = await this.#transport.readJson(response);
        const reason = body?.["reason"];
        if (response.status === 404 && body?.["outcome"] === "lost" && isGone(reason)) {
          this.#finish(reason);
          return "over";
        }
        return response.status >= 500 || response.status === 429 ? "failed" : "unsupported";
      }
      opened = true;
      this.#setStreaming(true);
      for await (const event of parseEventStream(response.body)) {
        if (event.event === "renewed") {
          let data: unknown;
          try {
            data = JSON.parse(event.data);
          } catch {
            return "dropped";
          }
          const renewal = renewalOf(isObject(data) ? data : undefined);
          if (renewal === undefined || renewal.session.id !== this.id) return "dropped";
          const arrived = now();
          if (this.#core.observe(arrived) === "active") this.#apply(mark, renewal.session, renewal.lost);
          mark = arrived;
        } else if (event.event === "lost") {
          let reason: unknown;
          try {
            const data: unknown = JSON.parse(event.data);
            reason = isObject(data) ? data["reason"] : undefined;
          } catch {
            return "dropped";
          }
          if (!this.#ending && isGone(reason)) this.#finish(reason);
          return "over";
        }
        if (!this.#live()) return "over";
      }
    } catch {
      // The stream broke (or was given up): below.
    } finally {
      if (opened) this.#setStreaming(false);
      this.#stop.signal.removeEventListener("abort", onStop);
      abort.abort();
    }
    if (!this.#live()) return "over";
    return opened ? "dropped" : "failed";
  }
}
