/**
 * JSON as the worker's pydantic reads a record of transcript.entries (pydantic-core's parser,
 * jiter), so that a TypeScript reader decides every record as transcript_connector.entries_topic
 * does. `JSON.parse` is not that parser: it keeps the last of a repeated member without a word
 * (a position naming a member twice is skipped), reads every number as a double (an offset past
 * 2**53 would change) and refuses NaN.
 *
 * - UTF-8 only, no BOM; whitespace " \t\n\r"; nothing after the document.
 * - NaN, Infinity and -Infinity are numbers (pydantic-core takes them; a field that needs an
 *   integer refuses them).
 * - An integer literal is a bigint (of at most 4300 digits, Python's limit); a number with a
 *   fraction or an exponent is a float, its text kept.
 * - A string escape must not leave a lone surrogate.
 * - A value inside more than 200 arrays and objects is too deep (pydantic-core's limit).
 * - Objects keep every member in order, repeated ones too: `member` gives the last (as
 *   pydantic does), `duplicatePath` the first one named again (as parse.duplicate_member).
 */

export type JsonNode =
  | { readonly type: "object"; readonly members: readonly (readonly [string, JsonNode])[] }
  | { readonly type: "array"; readonly items: readonly JsonNode[] }
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "int"; readonly value: bigint }
  | { readonly type: "float"; readonly value: number; readonly text: string }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "null" };

/** Why a text is not JSON to the worker's parser. */
export class NotJsonError extends Error {
  override name = "NotJsonError";
}

const MAX_DEPTH = 200;
const MAX_INT_DIGITS = 4300;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const HEX4 = /^[0-9a-fA-F]{4}$/;
const ESCAPES = new Map([['"', '"'], ["\\", "\\"], ["/", "/"], ["b", "\b"], ["f", "\f"], ["n", "\n"], ["r", "\r"], ["t", "\t"]]);

/** The document in `bytes` (UTF-8), or NotJsonError. */
export function parseJson(bytes: Uint8Array | string): JsonNode {
  let text: string;
  if (typeof bytes === "string") {
    text = bytes;
  } else {
    try {
      text = utf8.decode(bytes);
    } catch {
      throw new NotJsonError("not UTF-8");
    }
  }
  const r = new Reader(text);
  const node = r.document();
  return node;
}

/** The last member named `name` of an object node (undefined: none, or not an object). */
export function member(node: JsonNode, name: string): JsonNode | undefined {
  if (node.type !== "object") return undefined;
  let found: JsonNode | undefined;
  for (const [n, v] of node.members) if (n === name) found = v;
  return found;
}

/** The path of the first member named twice in one object (`origin.kind`, `a[0].b`), or null. */
export function duplicatePath(node: JsonNode): string | null {
  const path = firstDuplicate(node);
  if (path === null) return null;
  let out = "";
  for (const part of path) out += typeof part === "number" ? `[${part}]` : out ? `.${part}` : part;
  return out;
}

function firstDuplicate(node: JsonNode): (string | number)[] | null {
  if (node.type === "object") {
    const names = new Set<string>();
    for (const [name, item] of node.members) {
      if (names.has(name)) return [name];
      names.add(name);
      const inner = firstDuplicate(item);
      if (inner !== null) return [name, ...inner];
    }
  } else if (node.type === "array") {
    for (let i = 0; i < node.items.length; i++) {
      const inner = firstDuplicate(node.items[i]!);
      if (inner !== null) return [i, ...inner];
    }
  }
  return null;
}

interface Open {
  readonly kind: "object" | "array";
  readonly members: [string, JsonNode][];
  readonly items: JsonNode[];
  name: string; // the member being read (objects)
}

class Reader {
  i = 0;
  constructor(readonly s: string) {}

  fail(what: string): never {
    throw new NotJsonError(`${what} at character ${this.i}`);
  }

  space(): void {
    let c = this.s.charCodeAt(this.i);
    while (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) c = this.s.charCodeAt(++this.i);
  }

  document(): JsonNode {
    const node = this.value();
    this.space();
    if (this.i !== this.s.length) this.fail("data after the document");
    return node;
  }

  /** One value, containers read with a stack (no recursion: any depth is refused cleanly). */
  value(): JsonNode {
    const stack: Open[] = [];
    for (;;) {
      // a value is expected, inside stack.length containers
      if (stack.length > MAX_DEPTH) this.fail("nested too deep");
      this.space();
      const c = this.s[this.i];
      let done: JsonNode | null = null;
      if (c === "{" || c === "[") {
        this.i += 1;
        this.space();
        const close = c === "{" ? "}" : "]";
        if (this.s[this.i] === close) {
          this.i += 1;
          done = c === "{" ? { type: "object", members: [] } : { type: "array", items: [] };
        } else {
          const open: Open = { kind: c === "{" ? "object" : "array", members: [], items: [], name: "" };
          if (open.kind === "object") open.name = this.memberName();
          stack.push(open);
          continue;
        }
      } else {
        done = this.scalar();
      }
      // a value ended: add it to its container, then a comma or the container's end
      for (;;) {
        const top = stack.at(-1);
        if (top === undefined) return done;
        if (top.kind === "object") top.members.push([top.name, done]);
        else top.items.push(done);
        this.space();
        const d = this.s[this.i++];
        if (d === ",") {
          if (top.kind === "object") top.name = this.memberName();
          break;
        }
        if (d !== (top.kind === "object" ? "}" : "]")) this.fail("expected , or the end of a container");
        stack.pop();
        done = top.kind === "object" ? { type: "object", members: top.members } : { type: "array", items: top.items };
      }
    }
  }

  memberName(): string {
    this.space();
    if (this.s[this.i] !== '"') this.fail("expected a member name");
    const name = this.string();
    this.space();
    if (this.s[this.i++] !== ":") this.fail("expected :");
    return name;
  }

  scalar(): JsonNode {
    const c = this.s[this.i];
    if (c === '"') return { type: "string", value: this.string() };
    for (const [word, node] of WORDS) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        return node;
      }
    }
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.s);
    if (m === null) this.fail("not a value");
    this.i += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) return { type: "float", value: Number(m[0]), text: m[0] };
    if (m[0].replace("-", "").length > MAX_INT_DIGITS) this.fail("an integer of more than 4300 digits");
    return { type: "int", value: BigInt(m[0]) };
  }

  /** A string literal, its escapes decoded; a lone surrogate escape is refused. */
  string(): string {
    this.i += 1; // the opening quote
    let out = "";
    let from = this.i;
    for (;;) {
      const c = this.s.charCodeAt(this.i);
      if (Number.isNaN(c)) this.fail("an unterminated string");
      if (c < 0x20) this.fail("a control character in a string");
      if (c === 0x22) break;
      if (c === 0x5c) {
        out += this.s.slice(from, this.i);
        const e = this.s[this.i + 1] ?? "";
        if (e === "u") {
          const unit = this.hex(this.i + 2);
          this.i += 6;
          if (unit >= 0xd800 && unit <= 0xdbff) {
            // a high surrogate: a low one must follow, escaped
            if (this.s[this.i] !== "\\" || this.s[this.i + 1] !== "u") this.fail("a lone surrogate");
            const low = this.hex(this.i + 2);
            if (low < 0xdc00 || low > 0xdfff) this.fail("a lone surrogate");
            this.i += 6;
            out += String.fromCharCode(unit, low);
          } else if (unit >= 0xdc00 && unit <= 0xdfff) {
            this.fail("a lone surrogate");
          } else {
            out += String.fromCharCode(unit);
          }
        } else {
          const decoded = ESCAPES.get(e);
          if (decoded === undefined) this.fail("an invalid escape");
          out += decoded;
          this.i += 2;
        }
        from = this.i;
      } else {
        this.i += 1;
      }
    }
    out += this.s.slice(from, this.i);
    this.i += 1; // the closing quote
    return out;
  }

  hex(at: number): number {
    const digits = this.s.slice(at, at + 4);
    if (!HEX4.test(digits)) this.fail("an invalid \\u escape");
    return parseInt(digits, 16);
  }
}

const WORDS: readonly (readonly [string, JsonNode])[] = [
  ["true", { type: "bool", value: true }],
  ["false", { type: "bool", value: false }],
  ["null", { type: "null" }],
  ["NaN", { type: "float", value: NaN, text: "NaN" }],
  ["Infinity", { type: "float", value: Infinity, text: "Infinity" }],
  ["-Infinity", { type: "float", value: -Infinity, text: "-Infinity" }],
];
