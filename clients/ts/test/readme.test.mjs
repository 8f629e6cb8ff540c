// The README's TypeScript example compiles against the built package, so that what it
// shows gateway authors stays true.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from './helpers.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

test('README: the TypeScript example type-checks against the package', () => {
  const blocks = [...readFileSync(join(root, 'README.md'), 'utf8').matchAll(/```ts\n(.*?)```/gs)].map((m) => m[1]);
  assert.ok(blocks.length > 0, 'the README has no ts block');
  const dir = tempDir();
  blocks.forEach((b, i) => writeFileSync(join(dir, `example${i}.mts`), b.replaceAll("'@awareness/client'", `'${join(root, 'dist', 'index.js')}'`) + '\nexport {};\n'));
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution', 'NodeNext',
      '--skipLibCheck', '--typeRoots', join(root, 'node_modules', '@types'), '--types', 'node', ...blocks.map((_, i) => join(dir, `example${i}.mts`))], { encoding: 'utf8' });
  } catch (e) {
    assert.fail(`the README example does not compile:\n${e.stdout}${e.stderr}`);
  }
});
