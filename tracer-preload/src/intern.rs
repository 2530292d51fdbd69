//! Stack deduplication: the 64-bit key a producer computes from its frames, and
//! the writer's table from keys to the model's stack ids.
//!
//! A producer sends a stack's frames only the first time it uses the stack
//! (per thread, see `tls::already_sent`), then just the key. The writer maps
//! keys to dense ids in order of first appearance and emits each stack once.
//! Two different stacks colliding on a 64-bit key is the one approximation:
//! with a million distinct stacks its probability is about 3·10⁻⁸.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The key of "no stack" (depth 0, or nothing could be captured).
pub const NO_STACK: u64 = 0;

/// A well-mixed 64-bit key of a sequence of return addresses; never `NO_STACK`
/// unless `frames` is empty.
pub fn stack_key(frames: &[u64]) -> u64 {
    if frames.is_empty() {
        return NO_STACK;
    }
    // Four independent lanes (frame i feeds lane i % 4), so the multiplies
    // of neighbouring frames overlap instead of forming one long chain; one
    // multiply per frame, lanes combined in order, full avalanche at the end.
    const M: u64 = 0x632b_e59b_d9b4_e019;
    let mut lanes: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15 ^ (frames.len() as u64),
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0x27d4_eb2f_1656_67c5,
    ];
    let mut chunks = frames.chunks_exact(4);
    for c in &mut chunks {
        for (lane, &f) in lanes.iter_mut().zip(c) {
            *lane = (lane.rotate_left(23) ^ f).wrapping_mul(M);
        }
    }
    for (lane, &f) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = (lane.rotate_left(23) ^ f).wrapping_mul(M);
    }
    let mut h = lanes[0];
    for &l in &lanes[1..] {
        h = (h.rotate_left(29) ^ l).wrapping_mul(M);
    }
    let h = mix(h);
    if h == NO_STACK {
        1
    } else {
        h
    }
}

/// splitmix64's finaliser: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What the writer learned from interning a stack.
#[derive(Debug, PartialEq, Eq)]
pub enum Interned {
    /// A stack seen for the first time: emit it with this id.
    New(u64),
    /// Already emitted under this id.
    Known(u64),
}

/// Hashes a stack key to itself: keys are already avalanche-mixed, so the
/// writer's table lookup (one per allocation) needs no SipHash round.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// The writer's key → id table.
#[derive(Default)]
pub struct StackTable {
    ids: HashMap<u64, u64, BuildHasherDefault<KeyHasher>>,
    next: u64,
}

impl StackTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the stack with `key` (its frames arrive with the first use).
    pub fn intern(&mut self, key: u64) -> Interned {
        if let Some(&id) = self.ids.get(&key) {
            return Interned::Known(id);
        }
        let id = self.next;
        self.next += 1;
        self.ids.insert(key, id);
        Interned::New(id)
    }

    /// The id of a key already interned.
    pub fn id(&self, key: u64) -> Option<u64> {
        self.ids.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn key_depends_on_every_frame_and_on_order() {
        let a = stack_key(&[0x401000, 0x402000, 0x403000]);
        assert_eq!(a, stack_key(&[0x401000, 0x402000, 0x403000]));
        assert_ne!(a, stack_key(&[0x402000, 0x401000, 0x403000]));
        assert_ne!(a, stack_key(&[0x401000, 0x402000, 0x403001]));
        assert_ne!(a, stack_key(&[0x401000, 0x402000]));
        assert_ne!(a, stack_key(&[0x401000, 0x402000, 0x403000, 0]));
        assert_eq!(stack_key(&[]), NO_STACK);
        assert_ne!(stack_key(&[0]), NO_STACK);
    }

    #[test]
    fn no_collisions_among_many_similar_stacks() {
        let mut seen = HashSet::new();
        for i in 0..200_000u64 {
            let frames = [
                0x5555_0000_1000 + (i % 1000) * 8,
                0x5555_0000_2000 + i / 1000,
                0x7f00_0000_0000,
            ];
            assert!(seen.insert(stack_key(&frames)), "collision at {i}");
        }
    }

    #[test]
    fn ids_are_dense_in_order_of_first_use() {
        let mut t = StackTable::new();
        assert!(t.is_empty());
        assert_eq!(t.intern(77), Interned::New(0));
        assert_eq!(t.intern(12), Interned::New(1));
        assert_eq!(t.intern(77), Interned::Known(0));
        assert_eq!(t.id(12), Some(1));
        assert_eq!(t.id(13), None);
        assert_eq!(t.len(), 2);
    }
}
