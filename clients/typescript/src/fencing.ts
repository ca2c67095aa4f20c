// Fencing at the resource (DESIGN §16): a fencing token protects only what
// checks it. `@leasehold/client/fencing` has no runtime dependency: the
// PostgreSQL guard takes the caller's node-postgres client (pg 8, or anything
// with the same `query`) inside the caller's transaction.

/** A newer holder has written to the resource: this token is stale. */
export class StaleFencingToken extends Error {
  readonly outcome = "stale_fencing_token";
  readonly resource: string;
  /** The token presented. */
  readonly token: bigint;
  constructor(resource: string, token: bigint) {
    super(`stale fencing token ${token} for ${resource}: a newer holder has written`);
    this.name = "StaleFencingToken";
    this.resource = resource;
    this.token = token;
  }
}

/** The default table of the PostgreSQL guard. */
export const FENCE_TABLE = "leasehold_fence";

/**
 * The guard's table: the highest token seen per resource. Create it once
 * (a migration); `fenceTableDdl("my_schema.fence")` for another name.
 */
export const FENCE_TABLE_DDL = fenceTableDdl(FENCE_TABLE);

/** The DDL for a guard table named `table` (an identifier you control, optionally schema-qualified). */
export function fenceTableDdl(table: string): string {
  checkIdentifier(table);
  return `CREATE TABLE IF NOT EXISTS ${table} (
  resource   text        PRIMARY KEY,
  token      bigint      NOT NULL CHECK (token > 0),
  updated_at timestamptz NOT NULL DEFAULT now()
)`;
}

/** The statement the guard runs: record the token unless a higher one is stored. */
export function fenceStatement(table: string = FENCE_TABLE): string {
  checkIdentifier(table);
  return `INSERT INTO ${table} AS fence (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE fence.token <= EXCLUDED.token
RETURNING token`;
}

/** What the guard needs of a PostgreSQL client: node-postgres' `Client` and `PoolClient` fit. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null; rows: unknown[] }>;
}

export interface FenceOptions {
  /** The guard table (default `leasehold_fence`). */
  readonly table?: string;
}

/**
 * Inside the caller's transaction (BEGIN ... COMMIT on the same `client`),
 * records `token` as the highest seen for `resource`, or throws
 * `StaleFencingToken` when a higher one is stored: a newer holder has
 * written, so this (older) holder's transaction must roll back.
 *
 * The upsert locks the resource's row until the transaction ends, so a
 * newer holder's guard waits for this transaction and then wins; an older
 * holder arriving after a newer one's commit is refused. Equal tokens pass
 * (the same holder writing again). Call it first in the transaction, before
 * the writes it protects.
 */
export async function fence(client: Queryable, resource: string, token: number | bigint, options: FenceOptions = {}): Promise<void> {
  const t = typeof token === "bigint" ? token : BigInt(token);
  if (typeof token === "number" && !Number.isSafeInteger(token)) throw new RangeError("fencing token must be a safe integer");
  if (t <= 0n) throw new RangeError("fencing token must be positive");
  const result = await client.query(fenceStatement(options.table ?? FENCE_TABLE), [resource, t.toString()]);
  if ((result.rowCount ?? result.rows.length) === 0) throw new StaleFencingToken(resource, t);
}

/**
 * The compare-and-set recipe for any other store: keep the highest token
 * next to the data, and write only when the stored token is not higher, in
 * one atomic step of the store (a conditional write, a transaction, a
 * script):
 *
 * - SQL: `UPDATE t SET v = $v, token = $tok WHERE id = $id AND token <= $tok`
 *   (0 rows: stale).
 * - DynamoDB: `ConditionExpression: "attribute_not_exists(#t) OR #t <= :tok"`.
 * - Redis: a Lua script that compares the stored token and writes.
 * - etcd: a transaction comparing the token key's value.
 *
 * `compareAndSet` answers whether it wrote; a store adapter implements it,
 * and `fencedWrite` turns `false` into `StaleFencingToken`.
 */
export interface FencedStore<K, V> {
  compareAndSet(key: K, token: bigint, value: V): Promise<boolean>;
}

/** Writes through a `FencedStore`, throwing `StaleFencingToken` when a newer holder has written. */
export async function fencedWrite<K, V>(store: FencedStore<K, V>, key: K, token: number | bigint, value: V): Promise<void> {
  const t = typeof token === "bigint" ? token : BigInt(token);
  if (!(await store.compareAndSet(key, t, value))) throw new StaleFencingToken(String(key), t);
}

/** A `FencedStore` in memory: the reference behaviour, for tests and examples. */
export class MemoryFencedStore<K, V> implements FencedStore<K, V> {
  readonly #entries = new Map<K, { token: bigint; value: V }>();
  async compareAndSet(key: K, token: bigint, value: V): Promise<boolean> {
    const current = this.#entries.get(key);
    if (current !== undefined && current.token > token) return false;
    this.#entries.set(key, { token, value });
    return true;
  }
  get(key: K): { token: bigint; value: V } | undefined {
    return this.#entries.get(key);
  }
}

function checkIdentifier(table: string): void {
  if (!/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/.test(table)) {
    throw new TypeError(`table ${JSON.stringify(table)} must be a plain (optionally schema-qualified) identifier`);
  }
}
