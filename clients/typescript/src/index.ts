// @leasehold/client: a client for the leasehold lease service.

import "./dispose.js";

export {
  Client,
  digestOf,
  resourceOf,
  defaultDriftBudgetMs,
  leaderOf,
  type ClientOptions,
  type AcquireOptions,
  type AcquireResult,
  type RenewOptions,
  type InspectOptions,
  type ListOptions,
  type WatchOptions,
  type ObserveOptions,
  type LockOptions,
} from "./client.js";
export { Lease, type LeaseOptions, type KeepAliveOptions } from "./lease.js";
export { Session } from "./session.js";
export {
  sessionIdOf,
  type KeepAliveMode,
  type LostLease,
  type SessionAcquireOptions,
  type SessionAcquireResult,
  type SessionEndReason,
  type SessionEndResult,
  type SessionGoneReason,
  type SessionInfo,
  type SessionOptions,
  type SessionPage,
  type SessionRenewResult,
} from "./session_wire.js";
export { HandleCore, type LeaseState, type RenewReply, type ReleaseReply } from "./machine.js";
export {
  Election,
  NotLeaderError,
  AlreadyCampaigningError,
  type ElectionOptions,
  type Leadership,
  type StopReason,
  type StoppedLeading,
} from "./election.js";
export {
  LeaseholdError,
  UnavailableError,
  OverloadedError,
  IndeterminateError,
  RejectedError,
  InvalidRequestError,
  RefusedLocallyError,
  LeaseLost,
  NotAcquiredError,
  type FieldError,
  type UnavailableCause,
  type IndeterminateCause,
  type LossReason,
} from "./errors.js";
export { parseEventStream, type EventMessage } from "./sse.js";
export type {
  Resource,
  Attempt,
  Mode,
  Replication,
  LeaseRecord,
  PermitView,
  HeldBy,
  Inspection,
  ListedLease,
  Listing,
  ContendedReason,
  LostReason,
  AbsentReason,
  RenewResult,
  ReleaseResult,
  WatchEvent,
  Leader,
  CallOptions,
} from "./types.js";
