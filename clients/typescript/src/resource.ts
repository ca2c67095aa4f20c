// Resources and the names the service accepts: a resource is a purpose and
// the digest of a raw id (the raw id is hashed here and never sent).

import { sha256Hex } from "./sha256.js";
import type { Resource } from "./types.js";

/** A purpose: lowercase letters, digits and `-`, starting with a letter. */
export const PURPOSE = /^[a-z][a-z0-9-]{0,62}$/;
/** A resource digest: `v1.` and 64 lowercase hex digits. */
export const DIGEST = /^v1\.[0-9a-f]{64}$/;
/** An operation id. */
export const OPERATION_ID = /^[A-Za-z0-9._~-]{1,128}$/;

/** The resource digest of a raw id: `v1.` + SHA-256 hex. The service never sees raw ids. */
export function digestOf(rawId: string): string {
  return `v1.${sha256Hex(new TextEncoder().encode(rawId))}`;
}

/** A resource from a purpose and a raw id (the id is hashed here). */
export function resourceOf(purpose: string, rawId: string): Resource {
  return { purpose, digest: digestOf(rawId) };
}

