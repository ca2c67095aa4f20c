// Symbol.asyncDispose for runtimes that predate it (older browsers, Node
// before 18.18 / 20.4): the well-known symbol TypeScript's `await using`
// looks up. A no-op where the runtime has it.

const symbols = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
if (symbols.asyncDispose === undefined) {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("Symbol.asyncDispose") });
}
if (symbols.dispose === undefined) {
  Object.defineProperty(Symbol, "dispose", { value: Symbol.for("Symbol.dispose") });
}

export {};
