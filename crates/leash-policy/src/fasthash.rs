//! A fast, non-cryptographic hash for the rule index and the loader's bookkeeping (the FxHash mix: rotate, xor,
//! multiply, eight bytes at a time).
//!
//! Why not the standard SipHash: a request's decision hashes a few host suffixes, and a 100,000-entry policy is
//! hashed several times while loading; SipHash was a fifth of the load time. Why that is safe: only the operator's
//! policy puts keys in these tables. A client can only look up, and a lookup costs one probe sequence of a table
//! whose layout the client cannot influence.

use std::hash::{BuildHasher, Hasher};

/// Builds [`FastHasher`]s; the `S` of every `HashMap` here.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FastHash;

pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, FastHash>;

impl BuildHasher for FastHash {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct FastHasher(u64);

/// The FxHash multiplier (from Firefox and rustc): odd, with well-spread bits.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        // The length first, so keys that differ only by trailing zero bytes (padding below) hash apart.
        self.add(bytes.len() as u64);
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        let h = |s: &str| FastHash.hash_one(s);
        assert_eq!(h("example.com"), h("example.com"));
        assert_ne!(h("example.com"), h("example.org"));
        assert_ne!(h("a"), h("a\0"));
        let mut map: FastMap<Box<str>, u32> = FastMap::default();
        map.insert("x".into(), 1);
        assert_eq!(map.get("x"), Some(&1));
    }
}
