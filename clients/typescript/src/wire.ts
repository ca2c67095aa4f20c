// Wire decoding: a reply's body, checked field by field, as the typed
// outcome or error it says (mirrors src/client/reply.rs and the Python
// client's _wire.py). No I/O: the transport hands in a `Reply`.

import {
  IndeterminateError,
  InvalidRequestError,
  OverloadedError,
  RejectedError,
  UnavailableError,
  type FieldError,
  type LeaseholdError,
} from "./errors.js";
import { isObject, type Json, type JsonObject } from "./internal.js";
import { DIGEST } from "./resource.js";
import type { HeldBy, Inspection, Leader, LeaseRecord, ListedLease, PermitView, Resource } from "./types.js";

/** A reply that arrived: its status, its body when it is a JSON object, its headers. */
export interface Reply {
  readonly status: number;
  readonly body: JsonObject | undefined;
  readonly headers: Headers;
}

export function num(v: Json | undefined): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

export function str(v: Json | undefined): string | undefined {
  return typeof v === "string" ? v : undefined;
}


export function localInvalid(errors: FieldError[]): InvalidRequestError {
  return new InvalidRequestError(0, errors.map((e) => `${e.field}: ${e.message}`).join("; "), errors);
}

export function outcomeOf(reply: Reply): string {
  return str(reply.body?.["outcome"]) ?? "";
}

export function unexpected(reply: Reply, op: string): IndeterminateError {
  return new IndeterminateError(op, "unexpected_reply", reply.status);
}

export function required<T>(v: T | undefined, reply: Reply, op: string): T {
  if (v === undefined) throw unexpected(reply, op);
  return v;
}

function retryAfterOf(reply: Reply): number | undefined {
  const ms = num(reply.body?.["retryAfterMs"]);
  if (ms !== undefined) return ms;
  const header = reply.headers.get("retry-after");
  if (header !== null && /^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  return undefined;
}

/** The shared failures, a rejection, or (anything else) an unexpected reply. */
export function failure(reply: Reply, op: string): LeaseholdError {
  const outcome = outcomeOf(reply);
  switch (outcome) {
    case "unavailable":
      return new UnavailableError("service", retryAfterOf(reply));
    case "overloaded":
      return new OverloadedError(retryAfterOf(reply));
    // A request that overran the service's own request timeout may have
    // reached the store: as ambiguous as `indeterminate`.
    case "indeterminate":
    case "request_timeout":
      return new IndeterminateError(op, "service", reply.status);
  }
  if (reply.status >= 400 && reply.status < 500) {
    const detail = str(reply.body?.["detail"]) ?? "";
    const raw = reply.body?.["errors"];
    const errors: FieldError[] = [];
    if (Array.isArray(raw)) {
      for (const e of raw) {
        if (isObject(e) && typeof e["field"] === "string" && typeof e["message"] === "string") {
          errors.push({ field: e["field"], message: e["message"] });
        }
      }
    }
    if (outcome === "invalid_request") return new InvalidRequestError(reply.status, detail, errors);
    return new RejectedError(reply.status, outcome === "" ? "<none>" : outcome, detail, errors);
  }
  return unexpected(reply, op);
}

export function leaseRecord(reply: Reply, resource: Resource, op: string): LeaseRecord {
  const l = reply.body?.["lease"];
  if (!isObject(l)) throw unexpected(reply, op);
  const fencingToken = num(l["fencingToken"]);
  const ttlMs = num(l["ttlMs"]);
  const remainingMs = num(l["remainingMs"]);
  const acquiredAt = str(l["acquiredAt"]);
  const renewedAt = str(l["renewedAt"]);
  if (
    l["purpose"] !== resource.purpose ||
    l["digest"] !== resource.digest ||
    l["guarantee"] !== "fenced" ||
    fencingToken === undefined ||
    ttlMs === undefined ||
    remainingMs === undefined ||
    acquiredAt === undefined ||
    renewedAt === undefined
  ) {
    throw unexpected(reply, op);
  }
  const holder = str(l["holder"]);
  const rep = l["replication"];
  const bound = holdBound(l);
  return {
    purpose: resource.purpose,
    digest: resource.digest,
    fencingToken,
    ttlMs,
    remainingMs,
    ...(holder === undefined ? {} : { holder }),
    acquiredAt,
    renewedAt,
    guarantee: "fenced",
    ...(isObject(rep) && num(rep["acknowledged"]) !== undefined && num(rep["required"]) !== undefined
      ? { replication: { acknowledged: num(rep["acknowledged"])!, required: num(rep["required"])! } }
      : {}),
    ...bound,
  };
}

/** `maxHoldMs` and `holdEndsAt`, present only on a bounded hold. */
function holdBound(o: JsonObject): { maxHoldMs?: number; holdEndsAt?: string } {
  const maxHoldMs = num(o["maxHoldMs"]);
  const holdEndsAt = str(o["holdEndsAt"]);
  return { ...(maxHoldMs === undefined ? {} : { maxHoldMs }), ...(holdEndsAt === undefined ? {} : { holdEndsAt }) };
}

function permits(v: Json | undefined): PermitView[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out: PermitView[] = [];
  for (const p of v) {
    if (!isObject(p)) continue;
    const fencingToken = num(p["fencingToken"]);
    const remainingMs = num(p["remainingMs"]);
    const ttlMs = num(p["ttlMs"]);
    const acquiredAt = str(p["acquiredAt"]);
    const renewedAt = str(p["renewedAt"]);
    if (fencingToken === undefined || remainingMs === undefined || ttlMs === undefined || acquiredAt === undefined || renewedAt === undefined) continue;
    const holder = str(p["holder"]);
    out.push({ ...(holder === undefined ? {} : { holder }), fencingToken, remainingMs, ttlMs, acquiredAt, renewedAt, ...holdBound(p) });
  }
  return out;
}

/** An `inspected` body, checked; undefined when it is not one. */
export function inspectionOf(b: JsonObject | undefined): Inspection | undefined {
  if (b === undefined || b["outcome"] !== "inspected") return undefined;
  const held = b["held"];
  const version = str(b["version"]);
  if (typeof held !== "boolean" || version === undefined) return undefined;
  const heldBy = str(b["heldBy"]);
  if (heldBy !== undefined && heldBy !== "caller" && heldBy !== "caller_other_operation" && heldBy !== "other") return undefined;
  const mode = str(b["mode"]);
  const out: { -readonly [K in keyof Inspection]: Inspection[K] } = {
    outcome: "inspected",
    held,
    version,
    holders: num(b["holders"]) ?? 0,
  };
  const copyNum = (k: "remainingMs" | "fencingToken" | "ttlMs" | "limit" | "lockDelayRemainingMs"): void => {
    const v = num(b[k]);
    if (v !== undefined) out[k] = v;
  };
  copyNum("remainingMs");
  copyNum("fencingToken");
  copyNum("ttlMs");
  copyNum("limit");
  copyNum("lockDelayRemainingMs");
  if (heldBy !== undefined) out.heldBy = heldBy as HeldBy;
  const holder = str(b["holder"]);
  if (holder !== undefined) out.holder = holder;
  const acquiredAt = str(b["acquiredAt"]);
  if (acquiredAt !== undefined) out.acquiredAt = acquiredAt;
  const renewedAt = str(b["renewedAt"]);
  if (renewedAt !== undefined) out.renewedAt = renewedAt;
  if (mode === "exclusive" || mode === "shared") out.mode = mode;
  const p = permits(b["permits"]);
  if (p !== undefined) out.permits = p;
  return out;
}

export function inspection(reply: Reply, op: string): Inspection {
  if (outcomeOf(reply) !== "inspected") throw failure(reply, op);
  const i = inspectionOf(reply.body);
  if (i === undefined) throw unexpected(reply, op);
  return i;
}

export function listedLease(l: Json, reply: Reply, op: string): ListedLease {
  if (!isObject(l)) throw unexpected(reply, op);
  const digest = str(l["digest"]);
  const fencingToken = num(l["fencingToken"]);
  const remainingMs = num(l["remainingMs"]);
  const ttlMs = num(l["ttlMs"]);
  const acquiredAt = str(l["acquiredAt"]);
  const renewedAt = str(l["renewedAt"]);
  const holders = num(l["holders"]);
  const limit = num(l["limit"]);
  const mode = str(l["mode"]);
  if (
    digest === undefined || !DIGEST.test(digest) || fencingToken === undefined || remainingMs === undefined ||
    ttlMs === undefined || acquiredAt === undefined || renewedAt === undefined || holders === undefined ||
    limit === undefined || (mode !== "exclusive" && mode !== "shared")
  ) {
    throw unexpected(reply, op);
  }
  const holder = str(l["holder"]);
  const p = permits(l["permits"]);
  return {
    digest,
    ...(holder === undefined ? {} : { holder }),
    fencingToken,
    remainingMs,
    ttlMs,
    acquiredAt,
    renewedAt,
    holders,
    limit,
    mode,
    ...(p === undefined ? {} : { permits: p }),
  };
}

/** The leader an inspect answer shows. */
export function leaderOf(i: Inspection): Leader {
  if (!i.held) return { holder: undefined, fencingToken: undefined };
  return { holder: i.holder, fencingToken: i.fencingToken };
}
