// Small utilities, as an ES module.
import path from 'node:path';
import * as util from 'node:util';
import { createHash } from 'node:crypto';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function debounce(fn, wait = 100) {
  let timer;
  return function debounced(...args) {
    clearTimeout(timer);
    timer = setTimeout(() => fn.apply(this, args), wait);
  };
}

export async function retry(task, { attempts = 3, delay = 10 } = {}) {
  let lastError;
  for (let i = 0; i < attempts; i++) {
    try {
      return await task(i);
    } catch (e) {
      lastError = e;
      await sleep(delay * 2 ** i);
    }
  }
  throw lastError;
}

export const hash = (text) => createHash('sha256').update(text).digest('hex').slice(0, 12);

const SLUG = /[^a-z0-9]+/g;
export function slugify(s) {
  return s.toLowerCase().replace(SLUG, '-').replace(/^-+|-+$/g, '');
}

export function groupBy(items, key) {
  return items.reduce((acc, item) => {
    const k = typeof key === 'function' ? key(item) : item[key];
    (acc[k] ||= []).push(item);
    return acc;
  }, {});
}

export const formatBytes = (n) => {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
};

export const relative = (from, to) => path.relative(path.dirname(from), to) || '.';
export { util as nodeUtil };
export default { sleep, debounce, retry, hash, slugify, groupBy, formatBytes };
