/**
 * csv(train: "train.csv", test: "test.csv", label_column: "label" | 0, normalize: 255):
 * one sample per row, comma-separated numbers. A first row with any non-numeric field is a
 * header. The label column is `label_column` (a header name or a 0-based index); when null,
 * the column named like the spec's label input (or "label") when there is a header, else
 * column 0 (the common MNIST-as-CSV layout); the name "label" on a headerless file also means column 0. All other columns, in file order, are the
 * features: they fill the spec's feature inputs in spec order, each taking as many columns
 * as its per-sample size. `normalize: k` divides every feature by k.
 */
import * as fs from 'node:fs';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { inputRoles, sampleSize, type DataArray, type Dataset } from './dataset.js';

export interface CsvSpec {
  label_column: string | number | null;
  normalize: number | null;
}

function splitRow(line: string): string[] {
  return line.split(',').map((f) => {
    const t = f.trim();
    return t.length >= 2 && t.startsWith('"') && t.endsWith('"') ? t.slice(1, -1).trim() : t;
  });
}

function isNumber(s: string): boolean {
  return s !== '' && Number.isFinite(Number(s)) || /^[+-]?(nan|inf|infinity)$/i.test(s);
}

function parseNumber(s: string): number {
  const l = s.toLowerCase().replace(/^\+/, '');
  if (l === 'nan') return NaN;
  if (l === 'inf' || l === 'infinity') return Infinity;
  if (l === '-inf' || l === '-infinity') return -Infinity;
  return Number(s);
}

/** UTF-8 text or a UserError: a NUL byte or invalid UTF-8 means this is not a CSV file. */
function decodeText(bytes: Buffer, file: string): string {
  const nul = bytes.indexOf(0);
  if (nul >= 0) throw new UserError(`${file}: error: not a text CSV file (NUL byte at offset ${nul})\n  help: csv() reads comma-separated numbers as UTF-8 text`);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new UserError(`${file}: error: not a text CSV file (invalid UTF-8)\n  help: csv() reads comma-separated numbers as UTF-8 text`);
  }
}

/** A field quoted for an error message: control and non-ASCII characters escaped, long text cut. */
function shown(s: string, max = 40): string {
  const cut = s.length > max ? s.slice(0, max) + '...' : s;
  return JSON.stringify(cut).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function loadCsv(model: CheckedModel, file: string, spec: CsvSpec): Dataset {
  let text: string;
  try {
    text = decodeText(fs.readFileSync(file), file);
  } catch (e) {
    if (e instanceof UserError) throw e;
    const err = e as NodeJS.ErrnoException;
    throw new UserError(`${file}: error: ${err.code === 'ENOENT' ? 'data file not found' : `cannot read the data file (${err.message})`}\n  help: check the path in the spec's data source (relative paths are resolved from the spec's folder)`);
  }
  const lines = text.split(/\r?\n/);
  const rows: { line: number; fields: string[] }[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() === '') continue;
    rows.push({ line: i + 1, fields: splitRow(lines[i]) });
  }
  if (rows.length === 0) throw new UserError(`${file}: error: the CSV file is empty`);
  let header: string[] | null = null;
  if (rows[0].fields.some((f) => !isNumber(f))) header = rows.shift()!.fields;
  if (rows.length === 0) throw new UserError(`${file}: error: the CSV file has a header but no data rows`);
  const width = header ? header.length : rows[0].fields.length;

  const roles = inputRoles(model);
  let labelCol = -1;
  if (roles.label) {
    const lc = spec.label_column;
    if (typeof lc === 'number') {
      labelCol = lc;
    } else if (typeof lc === 'string' && !header && lc === 'label') {
      labelCol = 0; // the default name on a headerless file: the common label-first layout
    } else if (typeof lc === 'string') {
      if (!header) throw new UserError(`${file}: error: label_column "${lc}" names a column but the CSV file has no header row\n  help: give the column's 0-based index instead`);
      labelCol = header.indexOf(lc);
      if (labelCol < 0) throw new UserError(`${file}: error: no column named ${shown(String(lc))} (columns: ${header.slice(0, 20).map((h) => shown(h)).join(', ')}${header.length > 20 ? `, ... ${header.length} in all` : ''})`);
    } else if (header) {
      labelCol = header.indexOf(roles.label.name);
      if (labelCol < 0) labelCol = header.indexOf('label');
      if (labelCol < 0) labelCol = 0;
    } else {
      labelCol = 0;
    }
    if (labelCol < 0 || labelCol >= width) throw new UserError(`${file}: error: label_column ${labelCol} is outside the ${width} columns of the file`);
    if (sampleSize(roles.label) !== 1) {
      throw new UserError(`${file}: error: the label input '${roles.label.name}' takes ${sampleSize(roles.label)} values per sample; a CSV label column gives one`);
    }
  }
  const featureWidth = roles.features.reduce((s, f) => s + sampleSize(f), 0);
  const haveFeatures = width - (labelCol >= 0 ? 1 : 0);
  if (featureWidth !== haveFeatures) {
    throw new UserError(
      `${file}: error: the file has ${haveFeatures} feature columns but the spec's inputs ${roles.features.map((f) => `'${f.name}'`).join(', ')} take ${featureWidth} values per sample\n` +
        `  help: make the input shapes match the file${labelCol >= 0 ? ` (column ${labelCol} is the label)` : ''}`,
    );
  }
  const count = rows.length;
  const feats = roles.features.map((f) => (f.dtype === 'f32' ? new Float32Array(count * sampleSize(f)) : new Int32Array(count * sampleSize(f))));
  const labels = roles.label ? (roles.label.dtype === 'f32' ? new Float32Array(count) : new Int32Array(count)) : null;
  const scale = spec.normalize ?? 1;
  for (let r = 0; r < count; r++) {
    const { line, fields } = rows[r];
    if (fields.length !== width) {
      throw new UserError(`${file}:${line}: error: row has ${fields.length} fields, expected ${width} like ${header ? 'the header' : 'the first row'}\n  help: every row needs the same number of comma-separated values`);
    }
    let fi = 0; // feature input index
    let fo = 0; // offset within it
    for (let c = 0; c < width; c++) {
      const s = fields[c];
      if (!isNumber(s)) {
        const col = header ? `column "${header[c]}"` : `column ${c + 1}`;
        throw new UserError(`${file}:${line}: error: ${col}: ${shown(s)} is not a number`);
      }
      const v = parseNumber(s);
      if (c === labelCol) {
        if (labels instanceof Int32Array && !Number.isInteger(v)) {
          throw new UserError(`${file}:${line}: error: label ${shown(s)} is not an integer class index`);
        }
        labels![r] = v;
        continue;
      }
      const per = sampleSize(roles.features[fi]);
      const arr = feats[fi];
      arr[r * per + fo] = arr instanceof Float32Array ? v / scale : v;
      if (++fo === per) {
        fo = 0;
        fi++;
      }
    }
  }
  const tensors = new Map<string, DataArray>();
  roles.features.forEach((f, i) => tensors.set(f.name, feats[i]));
  if (roles.label && labels) tensors.set(roles.label.name, labels);
  return { source: file, count, tensors };
}
