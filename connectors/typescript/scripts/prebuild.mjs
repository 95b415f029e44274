// Before tsc: start from empty output directories (no stale files from removed sources) and
// copy the contract's JSON Schemas (../../schemas/json, the one source) into the package.
import { cpSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const from = fileURLToPath(new URL("../../../schemas/json/", import.meta.url));
for (const dir of ["dist", "build"]) rmSync(`${root}/${dir}`, { recursive: true, force: true });
mkdirSync(`${root}/dist/schemas`, { recursive: true });
const names = readdirSync(from).filter((n) => n.endsWith(".schema.json"));
if (!names.length) throw new Error(`no schemas in ${from}`);
for (const name of names) cpSync(`${from}${name}`, `${root}/dist/schemas/${name}`);
console.log(`copied ${names.length} schemas into dist/schemas`);
