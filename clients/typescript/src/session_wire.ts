// The session answers as the client reads them (docs/design.md §18, §19;
// mirrors src/client/session_wire.rs): the types, the id a secret names,
// and each answer checked field by field. No I/O.

import { isObject, type Json, type JsonObject } from "./internal.js";
import type { AcquireResult } from "./options.js";
import { sha256Hex } from "./sha256.js";
import type { Attempt, CallOptions, Mode, ReleaseResult, Resource } from "./types.js";
import { failure, num, outcomeOf, str, unexpected, type Reply } from "./wire.js";

/** How a session is kept alive. */
export type KeepAliveMode = "stream" | "renew" | "manual";

/** Why the service says a session is gone. */
export type SessionGoneReason = "session_ended" | "session_expired" | "absent";

/**
 * Why a session ended: the service's reason, `expired` (local validity ran
 * out unrenewed), `unknown` (an end without certain reply), `ended` (this
 * process ended it) or `closed` (`close()`: nothing renews it any more).
 */
export type SessionEndReason = SessionGoneReason | "expired" | "unknown" | "ended" | "closed";

/** A session as the service shows it (never its secret). */
export interface SessionInfo {
  readonly id: string;
  readonly holder?: string;
  readonly ttlMs: number;
  readonly remainingMs: number;
  readonly expiresAt: string;
  readonly createdAt: string;
  readonly renewedAt: string;
  readonly leases: number;
}

/** An attached lease a session renewal no longer holds (`revoked`, `max_hold`, `not_owner`, `absent`). */
export interface LostLease {
  readonly purpose: string;
  readonly digest: string;
  readonly reason: string;
}

export type SessionRenewResult =
  | { readonly outcome: "renewed"; readonly session: SessionInfo; readonly lost: readonly LostLease[] }
  | { readonly outcome: "lost"; readonly reason: SessionGoneReason };

export type SessionEndResult = { readonly outcome: "ended"; readonly released: number } | { readonly outcome: "already_absent" };

/** An acquire on a session: an acquire's outcomes, or the session's refusals. */
export type SessionAcquireResult =
  | AcquireResult
  | { readonly outcome: "session_full" }
  | { readonly outcome: "lost"; readonly reason: SessionGoneReason };

/** What to make a session with. */
export interface SessionOptions extends CallOptions {
  /** The session's TTL (1 s to 1 h). */
  readonly ttlMs: number;
  /** A public label. */
  readonly holder?: string;
  /** Default `stream`. */
  readonly keepAlive?: KeepAliveMode;
  /** The attempt to make it with (its owner token becomes the secret); a fresh one when absent. */
  readonly attempt?: Attempt;
  /** How often a create without certain reply is sent again with the same attempt. Default 3. */
  readonly createRetries?: number;
  /** How long before local validity ends the session (and its leases) stop unrenewed. Default TTL / 10, at least the drift budget. */
  readonly marginMs?: number;
}

/** What to acquire a lease on a session with (no TTL: the session's). */
export interface SessionAcquireOptions extends CallOptions {
  /** This lease's operation id (a fresh one when absent). */
  readonly operationId?: string;
  readonly waitMs?: number;
  readonly holder?: string;
  readonly limit?: number;
  readonly mode?: Mode;
  readonly lockDelayMs?: number;
  readonly maxHoldMs?: number;
}


/** The id of the session whose secret is `ownerToken`. */
export function sessionIdOf(ownerToken: string): string {
  const bytes = new TextEncoder().encode(`leasehold-session\x1f${ownerToken}`);
  return `s1.${sha256Hex(bytes).slice(0, 32)}`;
}

export function isGone(v: unknown): v is SessionGoneReason {
  return v === "session_ended" || v === "session_expired" || v === "absent";
}

/** A Session view, or undefined when off the contract. */
export function sessionInfoOf(v: Json | undefined): SessionInfo | undefined {
  if (!isObject(v)) return undefined;
  const id = str(v["id"]);
  const ttlMs = num(v["ttlMs"]);
  const remainingMs = num(v["remainingMs"]);
  const leases = num(v["leases"]);
  const expiresAt = str(v["expiresAt"]);
  const createdAt = str(v["createdAt"]);
  const renewedAt = str(v["renewedAt"]);
  const holder = v["holder"];
  if (id === undefined || ttlMs === undefined || remainingMs === undefined || leases === undefined) return undefined;
  if (expiresAt === undefined || createdAt === undefined || renewedAt === undefined) return undefined;
  if (holder !== undefined && typeof holder !== "string") return undefined;
  const base = { id, ttlMs, remainingMs, expiresAt, createdAt, renewedAt, leases };
  return holder === undefined ? base : { ...base, holder };
}

/** A renew answer (or a keep-alive `renewed` event's data), or undefined when off the contract. */
export function renewalOf(body: JsonObject | undefined): { session: SessionInfo; lost: LostLease[] } | undefined {
  const session = sessionInfoOf(body?.["session"]);
  if (session === undefined) return undefined;
  const raw = body?.["lost"];
  const lost: LostLease[] = [];
  if (raw !== undefined) {
    if (!Array.isArray(raw)) return undefined;
    for (const l of raw) {
      if (!isObject(l)) return undefined;
      const purpose = str(l["purpose"]);
      const digest = str(l["digest"]);
      const reason = str(l["reason"]);
      if (purpose === undefined || digest === undefined || reason === undefined) return undefined;
      lost.push({ purpose, digest, reason });
    }
  }
  return { session, lost };
}

/** A page of `GET /sessions/{id}`. */
export interface SessionPage {
  readonly session: SessionInfo;
  readonly leases: readonly Resource[];
  readonly nextCursor?: string;
}

/** A `GET /sessions/{id}` answer: undefined when the session is gone. */
export function sessionPage(reply: Reply): SessionPage | undefined {
  const outcome = outcomeOf(reply);
  if (reply.status === 404 && (outcome === "lost" || outcome === "not_found")) return undefined;
  if (outcome !== "session") throw failure(reply, "session");
  const session = sessionInfoOf(reply.body?.["session"]);
  const raw = reply.body?.["leases"];
  if (session === undefined || !Array.isArray(raw)) throw unexpected(reply, "session");
  const leases: Resource[] = [];
  for (const l of raw) {
    const purpose = isObject(l) ? str(l["purpose"]) : undefined;
    const digest = isObject(l) ? str(l["digest"]) : undefined;
    if (purpose === undefined || digest === undefined) throw unexpected(reply, "session");
    leases.push({ purpose, digest });
  }
  const nextCursor = str(reply.body?.["nextCursor"]);
  return nextCursor === undefined ? { session, leases } : { session, leases, nextCursor };
}

/** Lost leases by `purpose/digest`. */
export function lostMap(lost: readonly LostLease[]): Map<string, string> {
  return new Map(lost.map((l) => [`${l.purpose}/${l.digest}`, l.reason]));
}

/** A lease release's answer (`DELETE /sessions/{id}/leases/…`). */
export function releaseAnswer(reply: Reply, op: string): ReleaseResult {
  switch (outcomeOf(reply)) {
    case "released":
      return { outcome: "released" };
    case "already_absent": {
      const reason = str(reply.body?.["reason"]);
      return reason === "revoked" || reason === "max_hold" ? { outcome: "already_absent", reason } : { outcome: "already_absent" };
    }
    case "not_owner":
      return { outcome: "not_owner" };
    default:
      throw failure(reply, op);
  }
}
