const { Readable } = require('stream');

async function* numbers(limit) {
  for (let i = 0; i < limit; i++) {
    await null;
    yield i;
  }
}

const pipeline = async (source, ...stages) => {
  let result = source;
  for (const stage of stages) result = stage(result);
  const out = [];
  for await (const value of result) out.push(value);
  return out;
};

const map = (fn) => async function* (iter) {
  for await (const x of iter) yield fn(x);
};

const filter = (pred) => async function* (iter) {
  for await (const x of iter) if (await pred(x)) yield x;
};

function tag(strings, ...values) {
  return strings.raw.map((s, i) => s + (i < values.length ? `[${values[i]}]` : '')).join('');
}

(async () => {
  const squares = await pipeline(numbers(10), map((x) => x ** 2), filter(async (x) => x % 2 === 0));
  const [first, , third = 0, ...rest] = squares;
  const { length, [0]: zero } = squares;
  const big = 12_345_678n * 2n;
  const nested = { a: { b: { c: null } } };
  console.log(tag`first=${first} third=${third}`, rest.length, length, zero, big.toString(16),
    nested?.a?.b?.c ?? 'none', nested.x?.y, 0x1f + 0o17 + 0b11 + 1e-3 + .5);
  const stream = Readable.from(['a', 'b']);
  stream.on('data', (chunk) => void console.log(`chunk: ${chunk}`));
  let total = 0;
  total += squares.length > 3 ? 1 : 0;
  total ||= -1;
  label: {
    if (total) break label;
  }
  try {
    JSON.parse('{');
  } catch {
    console.error(`bad json ${`nested ${total}`}`);
  } finally {
    console.log(typeof total, new.target === undefined, void 0);
  }
})().catch((err) => {
  process.exitCode = 1;
  console.error(err);
});
