/** Times checkSource on one file (CPU ms): `npx tsx tools/fuzz/time_spec.ts FILE` (reproducing fuzz findings). */
import * as fs from 'node:fs';
import { checkSource } from '../../compiler/check/index.js';
const file = process.argv[2];
const text = fs.readFileSync(file, 'utf8');
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
const t0 = cpu();
try { checkSource(text, file); console.log('accepted'); } catch (e) { console.log(String((e as Error).message).split('\n')[0]); }
console.log(`${(cpu() - t0).toFixed(0)} ms CPU`);
