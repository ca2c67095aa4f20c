// Small helpers shared by the modules; not part of the public surface.

/** Monotonic milliseconds. */
export function now(): number {
  return performance.now();
}

/** Timers that do not keep a Node process alive (no-op in browsers). */
export function unref(timer: unknown): void {
  if (typeof timer === "object" && timer !== null && "unref" in timer) {
    const fn = (timer as { unref: unknown }).unref;
    if (typeof fn === "function") fn.call(timer);
  }
}

/**
 * Waits `ms` unless one of `signals` aborts first. Resolves `true` when
 * the time elapsed, `false` when a signal aborted. Never rejects.
 */
export function pause(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<boolean> {
  return new Promise((resolve) => {
    const live = signals.filter((s): s is AbortSignal => s !== undefined);
    if (live.some((s) => s.aborted)) {
      resolve(false);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      for (const s of live) s.removeEventListener("abort", onAbort);
      resolve(false);
    };
    const timer = setTimeout(() => {
      for (const s of live) s.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    for (const s of live) s.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * An AbortController aborted when any of `signals` aborts (AbortSignal.any
 * is missing from Node 18). `dispose()` detaches it from them.
 */
export function linked(...signals: (AbortSignal | undefined)[]): { controller: AbortController; dispose: () => void } {
  const controller = new AbortController();
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const listeners: [AbortSignal, () => void][] = [];
  for (const s of live) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    const on = (): void => controller.abort(s.reason);
    s.addEventListener("abort", on, { once: true });
    listeners.push([s, on]);
  }
  return {
    controller,
    dispose: () => {
      for (const [s, on] of listeners) s.removeEventListener("abort", on);
    },
  };
}

let counter = 0;

/** A fresh operation id: `<prefix>-<time>-<counter>-<random>` (not a secret). */
export function operationId(prefix: string): string {
  counter = (counter + 1) % 0x7fffffff;
  const random = Math.floor(Math.random() * 0x7fffffff).toString(36);
  return `${prefix}-${Date.now().toString(36)}-${counter.toString(36)}-${random}`;
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
