import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** connectors/typescript/ (this file runs from build/test/). */
export const PACKAGE_ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** The repository root. */
export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const VECTORS_FILE = process.env.SESSION_KEY_VECTORS ?? `${REPO_ROOT}schemas/vectors/session_keys.json`;

export type Partitions = Record<string, number> | null;
export interface ErrorExpectation {
  python: string;
  typescript: string;
  message: string;
}
interface Outcome {
  id: string;
  tags: string[];
  expect?: string;
  partitions?: Partitions;
  error?: ErrorExpectation;
}
export interface CanonicalVector extends Outcome {
  raw: string;
  agent_id: string;
}
export interface RouteVector extends Outcome {
  agent_id: string;
  route: { channel: string; peer_kind: string; peer_id: string; account_id?: string | null; thread_id?: string | null };
  dm_scope: string;
}
export interface Vectors {
  python: string;
  unicode: string;
  partition_counts: number[];
  canonical: CanonicalVector[];
  route: RouteVector[];
  partition: { key: string; partitions: Partitions }[];
  timestamps: { text: string; python: string; typescript: "valid" | "invalid" }[];
  unicode_digests: Record<"lower" | "sigma_before" | "sigma_after" | "strip" | "repr", string>;
}

export function loadVectors(): Vectors {
  return JSON.parse(readFileSync(VECTORS_FILE, "utf8")) as Vectors;
}

/** A string as a test name shows it: escapes for anything that is not printable ASCII. */
export function shown(s: string): string {
  return JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
