// Live objects of one kind per owner (a device's KV caches, its shape executors), for what
// reports on the owner as a whole: metrics and memory snapshots. Weak: an object collected
// without being released drops out by itself.

export class LiveObjects<T extends object> {
  readonly #byOwner = new WeakMap<object, Set<WeakRef<T>>>()

  /** The live objects of `owner`, oldest first. */
  of(owner: object): T[] {
    const set = this.#byOwner.get(owner)
    if (!set) return []
    const out: T[] = []
    for (const ref of set) {
      const o = ref.deref()
      if (o) out.push(o)
      else set.delete(ref)
    }
    return out
  }

  /** Adds `obj` under `owner`; returns what removes it. */
  add(owner: object, obj: T): () => void {
    let set = this.#byOwner.get(owner)
    if (!set) this.#byOwner.set(owner, (set = new Set()))
    const ref = new WeakRef(obj)
    set.add(ref)
    return () => set.delete(ref)
  }
}
