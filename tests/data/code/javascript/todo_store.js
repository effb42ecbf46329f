'use strict';

const EventEmitter = require('events');
const { readFile, writeFile } = require('fs/promises');

const DEFAULTS = Object.freeze({ path: './todos.json', autosave: true });

class TodoStore extends EventEmitter {
  #items = new Map();
  #nextId = 1;
  static instances = 0;

  static {
    TodoStore.instances = 0;
  }

  constructor(options = {}) {
    super();
    this.options = { ...DEFAULTS, ...options };
    TodoStore.instances++;
  }

  get size() {
    return this.#items.size;
  }

  add(title, { due = null, tags = [] } = {}) {
    if (typeof title !== 'string' || !title.trim()) {
      throw new TypeError(`invalid title: ${JSON.stringify(title)}`);
    }
    const item = { id: this.#nextId++, title: title.trim(), done: false, due, tags: [...tags] };
    this.#items.set(item.id, item);
    this.emit('change', { type: 'add', item });
    return item;
  }

  complete(id) {
    const item = this.#items.get(id);
    if (!item) return false;
    item.done = true;
    this.emit('change', { type: 'complete', item });
    return true;
  }

  *[Symbol.iterator]() {
    yield* this.#items.values();
  }

  pending() {
    return [...this].filter((t) => !t.done).sort((a, b) => (a.due ?? Infinity) - (b.due ?? Infinity));
  }

  async save() {
    const data = JSON.stringify([...this.#items.values()], null, 2);
    await writeFile(this.options.path, data, 'utf8');
  }

  async load() {
    try {
      const text = await readFile(this.options.path, 'utf8');
      for (const item of JSON.parse(text)) {
        this.#items.set(item.id, item);
        this.#nextId = Math.max(this.#nextId, item.id + 1);
      }
    } catch (err) {
      if (err?.code !== 'ENOENT') throw err;
    }
    return this;
  }
}

module.exports = { TodoStore, DEFAULTS };
