//! The manager against a model of the device: every slot it hands out is "written" with a
//! fingerprint of the whole prefix up to that token (as K/V depend on every earlier token),
//! copies and swaps move those fingerprints, and after every operation each resident
//! sequence must read back, through its block table, exactly its own prefix.

use std::collections::HashMap;

use crate::{KvConfig, KvError, KvManager};

fn config(num_blocks: u32, prefix_caching: bool) -> KvConfig {
    KvConfig { block_tokens: 4, num_blocks, max_seqs: 16, max_seq_len: 64, prefix_caching }
}

/// Fingerprint of `tokens[..=i]`.
fn fingerprint(tokens: &[u32], i: usize) -> u64 {
    tokens[..=i].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3))
}

struct Device {
    slots: Vec<Option<u64>>,
    swapped: HashMap<u64, Vec<Vec<Option<u64>>>>,
    tokens: HashMap<u64, Vec<u32>>,
}

impl Device {
    fn new(c: &KvConfig) -> Self {
        Device {
            slots: vec![None; (c.num_blocks * c.block_tokens) as usize],
            swapped: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    fn apply(&mut self, kv: &mut KvManager, seq: u64, a: &crate::Append, written: &[u32]) {
        let bt = kv.config().block_tokens as usize;
        for c in &a.copies {
            for o in 0..bt {
                self.slots[c.dst as usize * bt + o] = self.slots[c.src as usize * bt + o];
            }
        }
        let all = self.tokens.get_mut(&seq).unwrap();
        let start = all.len();
        all.extend_from_slice(written);
        for (k, &slot) in a.slots.iter().enumerate() {
            self.slots[slot as usize] = Some(fingerprint(all, start + k));
        }
        kv.mark_written(seq, written.len() as u32).unwrap();
    }

    fn verify(&self, kv: &KvManager) {
        let bt = kv.config().block_tokens as usize;
        for (&seq, tokens) in &self.tokens {
            if kv.row(seq).unwrap().is_none() {
                continue;
            }
            let blocks = kv.blocks(seq).unwrap();
            for i in 0..tokens.len() {
                let got = self.slots[blocks[i / bt] as usize * bt + i % bt];
                assert_eq!(got, Some(fingerprint(tokens, i)), "sequence {seq} token {i} reads another prefix's KV");
            }
        }
    }
}

#[test]
fn prefix_hits_share_blocks_and_leave_the_last_token() {
    let mut kv = KvManager::new(config(16, true)).unwrap();
    let prompt: Vec<u32> = (0..12).collect();
    let (a, _) = kv.add_sequence(&prompt, 0).unwrap();
    kv.append(a, &prompt).unwrap();
    // Nothing is shared before the step wrote the K/V (Note [A block is shared once written]).
    assert_eq!(kv.lookup(&prompt, 0), (0, true));
    kv.mark_written(a, 12).unwrap();
    assert_eq!(kv.lookup(&prompt, 0), (8, true));
    assert_eq!(kv.stats().prefix_query_tokens, 8, "lookup counts nothing: these 8 are a's own query");
    // Same 12-token prompt: two whole blocks hit, the third is left since it holds the last token.
    let (b, _) = kv.add_sequence(&prompt, 0).unwrap();
    assert_eq!(kv.len(b).unwrap(), 8);
    assert_eq!(kv.blocks(b).unwrap(), &kv.blocks(a).unwrap()[..2]);
    // Another salt (tenant) shares nothing.
    let (c, _) = kv.add_sequence(&prompt, 7).unwrap();
    assert_eq!(kv.len(c).unwrap(), 0);
    let st = kv.stats();
    assert_eq!((st.prefix_query_tokens, st.prefix_hit_tokens), (24, 8));
    // A different second block stops the chain there, though its third block is equal.
    let mut other = prompt.clone();
    other[5] = 99;
    let (d, _) = kv.add_sequence(&other, 0).unwrap();
    assert_eq!(kv.len(d).unwrap(), 4);
    kv.check();
}

#[test]
fn a_step_that_never_wrote_shares_nothing() {
    let mut kv = KvManager::new(config(16, true)).unwrap();
    let p: Vec<u32> = (0..9).collect();
    let (a, _) = kv.add_sequence(&p, 0).unwrap();
    kv.append(a, &p).unwrap();
    // Only the last 4 tokens written: a gap before them, so nothing counts as written.
    kv.mark_written(a, 4).unwrap();
    kv.free(a).unwrap();
    let (b, _) = kv.add_sequence(&p, 0).unwrap();
    assert_eq!(kv.len(b).unwrap(), 0);
    assert_eq!(kv.stats().cached_blocks, 0, "unwritten blocks went back as plain free blocks");
    // A full cache says so without taking anything.
    let mut small = KvManager::new(config(2, true)).unwrap();
    assert_eq!(small.lookup(&[1; 8], 0), (0, true));
    assert_eq!(small.lookup(&[1; 9], 0), (0, false));
    let (c, _) = small.add_sequence(&[], 0).unwrap();
    small.append(c, &[1; 5]).unwrap();
    assert_eq!(small.lookup(&[1; 4], 0), (0, false));
    kv.check();
}

#[test]
fn freed_cached_blocks_are_evicted_least_recent_and_tail_first() {
    let mut kv = KvManager::new(config(4, true)).unwrap();
    let p: Vec<u32> = (0..9).collect();
    let (a, _) = kv.add_sequence(&p, 0).unwrap();
    kv.append(a, &p).unwrap(); // blocks 0, 1 full and cached; 2 partial
    kv.mark_written(a, 9).unwrap();
    kv.free(a).unwrap();
    let st = kv.stats();
    assert_eq!((st.cached_blocks, st.free_blocks, st.used_blocks), (2, 2, 0));
    // Four fresh blocks: the two plain free first, then the tail cached block, then the head.
    let (b, _) = kv.add_sequence(&[], 0).unwrap();
    kv.append(b, &[50; 12]).unwrap();
    assert_eq!(kv.stats().evictions, 1);
    let (c, _) = kv.add_sequence(&p, 0).unwrap();
    assert_eq!(kv.len(c).unwrap(), 4, "the head block survived the eviction");
    kv.check();
}

#[test]
fn fork_copies_a_shared_partial_block_on_first_write() {
    let mut kv = KvManager::new(config(8, false)).unwrap();
    let (a, _) = kv.add_sequence(&[], 0).unwrap();
    kv.append(a, &[1, 2, 3, 4, 5, 6]).unwrap();
    let (b, _) = kv.fork(a).unwrap();
    assert_eq!(kv.blocks(b).unwrap(), kv.blocks(a).unwrap());
    let step = kv.append(b, &[7]).unwrap();
    assert_eq!(step.copies.len(), 1, "the partial block is copied");
    assert_eq!(step.copies[0].src, kv.blocks(a).unwrap()[1]);
    assert_eq!(kv.blocks(b).unwrap()[0], kv.blocks(a).unwrap()[0], "the full block stays shared");
    let rows = kv.summaries();
    assert_eq!((rows[0].id, rows[0].tokens, rows[0].blocks, rows[0].shared_blocks), (a, 6, 2, 1));
    assert_eq!((rows[1].id, rows[1].tokens, rows[1].blocks, rows[1].shared_blocks), (b, 7, 2, 1));
    // The original writes in place now that it is the only owner.
    assert!(kv.append(a, &[8]).unwrap().copies.is_empty());
    assert_eq!(kv.stats().copies_on_write, 1);
    kv.check();
}

#[test]
fn a_full_cache_refuses_with_figures_and_changes_nothing() {
    let mut kv = KvManager::new(config(3, true)).unwrap();
    let (a, _) = kv.add_sequence(&[], 0).unwrap();
    kv.append(a, &[1; 10]).unwrap();
    assert!(!kv.can_append(&[(a, 3)]).unwrap());
    let before = kv.stats();
    let err = kv.append(a, &[1; 3]).unwrap_err();
    assert_eq!(err, KvError::OutOfBlocks { what: "append", needed: 1, free: 0, evictable: 0, total: 3 });
    assert_eq!(err.code(), "KV_CACHE_FULL");
    assert_eq!(kv.stats(), before);
    assert_eq!(kv.len(a).unwrap(), 10);
    let too_long = kv.append(a, &[0; 60]).unwrap_err();
    assert!(matches!(too_long, KvError::SequenceTooLong { length: 10, adding: 60, max: 64, .. }));
    kv.free(a).unwrap();
    assert_eq!(kv.free(a).unwrap_err().code(), "USE_AFTER_FREE");
    kv.check();
}

#[test]
fn blocks_and_rows_held_for_recorded_work_are_not_taken_until_let_go() {
    let mut kv = KvManager::new(KvConfig { max_seqs: 2, ..config(2, false) }).unwrap();
    let (a, _) = kv.add_sequence(&[], 0).unwrap();
    kv.append(a, &[1, 2, 3]).unwrap();
    let (row, blocks) = (kv.row(a).unwrap().unwrap(), kv.blocks(a).unwrap().to_vec());
    // A step recorded on a stream names a's row and block; a is then freed (a cancelled request).
    kv.hold(&[row], &blocks);
    kv.free(a).unwrap();
    kv.check();
    assert_eq!(kv.stats().free_blocks, 1, "the held block is not free");
    let (b, _) = kv.add_sequence(&[], 0).unwrap();
    kv.append(b, &[4, 5, 6, 7]).unwrap();
    assert_ne!(kv.row(b).unwrap(), Some(row), "the held row is not taken");
    assert!(!kv.blocks(b).unwrap().contains(&blocks[0]), "the held block is not taken");
    assert_eq!(kv.append(b, &[8]).unwrap_err().code(), "KV_CACHE_FULL");
    // The stream submitted: the next step may take them.
    kv.unhold(&[row], &blocks);
    kv.check();
    kv.append(b, &[8]).unwrap();
    assert_eq!(kv.blocks(b).unwrap()[1], blocks[0]);
    let (c, _) = kv.add_sequence(&[], 0).unwrap();
    assert_eq!(kv.row(c).unwrap(), Some(row));
    kv.check();
}

#[test]
fn swap_in_takes_still_cached_blocks_and_restores_the_rest() {
    let mut kv = KvManager::new(config(6, true)).unwrap();
    let p: Vec<u32> = (0..10).collect();
    let (a, _) = kv.add_sequence(&p, 0).unwrap();
    kv.append(a, &p).unwrap();
    kv.mark_written(a, 10).unwrap();
    let out = kv.swap_out(a).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(kv.append(a, &[1]).unwrap_err(), KvError::Swapped { seq: a, what: "append" });
    let back = kv.swap_in(a).unwrap();
    // Blocks 0 and 1 were full and cached, so only the partial third is written back.
    assert_eq!(back.restore.len(), 1);
    assert_eq!(back.restore[0].0, 2);
    assert_eq!(&back.table.blocks[..2], &out[..2]);
    kv.check();
}

#[test]
fn random_operations_keep_every_sequence_reading_its_own_prefix() {
    for seed in 0..40u64 {
        let mut rng = crate::tests::Rng(seed * 2 + 1);
        let c = config(6 + (seed % 20) as u32, seed % 3 != 0);
        let mut kv = KvManager::new(c).unwrap();
        let mut dev = Device::new(&c);
        let prefixes: Vec<Vec<u32>> = (0..3).map(|p| (0..20).map(|i| (p * 100 + i) as u32).collect()).collect();
        let mut live: Vec<u64> = Vec::new();
        for _ in 0..400 {
            let op = rng.below(8);
            match op {
                0 => {
                    let mut prompt = prefixes[rng.below(3) as usize][..rng.below(20) as usize].to_vec();
                    prompt.push(rng.below(5) as u32);
                    if let Ok((s, _)) = kv.add_sequence(&prompt, rng.below(2)) {
                        let hit = kv.len(s).unwrap() as usize;
                        dev.tokens.insert(s, prompt[..hit].to_vec());
                        live.push(s);
                        if let Ok(a) = kv.append(s, &prompt[hit..]) {
                            dev.apply(&mut kv, s, &a, &prompt[hit..]);
                        } else {
                            kv.free(s).unwrap();
                            dev.tokens.remove(&s);
                            live.pop();
                        }
                    }
                }
                1..=3 if !live.is_empty() => {
                    let s = live[rng.below(live.len() as u64) as usize];
                    let toks: Vec<u32> = (0..1 + rng.below(6)).map(|_| rng.below(4) as u32).collect();
                    let can = kv.can_append(&[(s, toks.len() as u32)]);
                    match kv.append(s, &toks) {
                        Ok(a) => dev.apply(&mut kv, s, &a, &toks),
                        Err(e) => assert!(
                            matches!(
                                e,
                                KvError::OutOfBlocks { .. } | KvError::SequenceTooLong { .. } | KvError::Swapped { .. }
                            ),
                            "{e}"
                        ),
                    }
                    if can == Ok(true) {
                        // can_append said yes, so the append above must have succeeded.
                        assert!(dev.tokens[&s].len() >= toks.len());
                    }
                }
                4 if !live.is_empty() => {
                    let s = live[rng.below(live.len() as u64) as usize];
                    if let Ok((f, _)) = kv.fork(s) {
                        dev.tokens.insert(f, dev.tokens[&s].clone());
                        live.push(f);
                    }
                }
                5 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let s = live.swap_remove(i);
                    kv.free(s).unwrap();
                    dev.tokens.remove(&s);
                    dev.swapped.remove(&s);
                }
                6 if !live.is_empty() => {
                    let s = live[rng.below(live.len() as u64) as usize];
                    let bt = c.block_tokens as usize;
                    if let Ok(blocks) = kv.swap_out(s) {
                        let saved = blocks
                            .iter()
                            .map(|&b| dev.slots[b as usize * bt..(b as usize + 1) * bt].to_vec())
                            .collect();
                        dev.swapped.insert(s, saved);
                    } else if let Ok(back) = kv.swap_in(s) {
                        let saved = dev.swapped.remove(&s).unwrap();
                        for (i, b) in back.restore {
                            dev.slots[b as usize * bt..(b as usize + 1) * bt].copy_from_slice(&saved[i as usize]);
                        }
                    }
                }
                7 if !live.is_empty() => {
                    let s = live[rng.below(live.len() as u64) as usize];
                    if let Ok(a) = kv.reserve(s, rng.below(9) as u32) {
                        assert!(a.slots.is_empty());
                        dev.apply(&mut kv, s, &a, &[]);
                    }
                }
                _ => {}
            }
            kv.check();
            dev.verify(&kv);
        }
    }
}

pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
