/** The mpsc version (package.json), shared by `mpsc --version` and run folders' config.json. */
import { readFileSync } from 'node:fs';

export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}
