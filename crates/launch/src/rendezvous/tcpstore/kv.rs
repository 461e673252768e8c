//! The key-value map behind ditto's store, with the semantics of torch's TCPStore
//! server (`ADD` keeps decimal text, `COMPARE_SET`'s answer on an absent key, ...), so a
//! client cannot tell the two apart. Shared by the sessions of remote ranks and by rank
//! 0's in-process handle; bounded in total size.

use std::collections::HashMap;

/// The most bytes (keys and values) the store holds; a write beyond it is refused.
pub const MAX_STORE_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
pub(crate) struct Kv {
    entries: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl Kv {
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.entries.get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn all_present<K: AsRef<[u8]>>(&self, keys: &[K]) -> bool {
        keys.iter().all(|k| self.entries.contains_key(k.as_ref()))
    }

    /// Stores `value` under `key`, unless the store would outgrow [`MAX_STORE_BYTES`].
    pub(crate) fn set(&mut self, key: &[u8], value: Vec<u8>) -> Result<(), String> {
        let old = self.entries.get(key).map_or(0, |v| key.len() + v.len());
        let new = self.bytes - old + key.len() + value.len();
        if new > MAX_STORE_BYTES {
            return Err(format!(
                "the store would hold {new} bytes, more than {MAX_STORE_BYTES}"
            ));
        }
        self.bytes = new;
        self.entries.insert(key.to_vec(), value);
        Ok(())
    }

    /// Adds `delta` to the integer stored as decimal text under `key` (0 if absent).
    pub(crate) fn add(&mut self, key: &[u8], delta: i64) -> Result<i64, String> {
        let current = match self.entries.get(key) {
            None => 0,
            Some(text) => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| "ADD on a key whose value is not a decimal integer".to_string())?,
        };
        let sum = current
            .checked_add(delta)
            .ok_or_else(|| format!("ADD {delta} to {current} overflows an i64"))?;
        self.set(key, sum.to_string().into_bytes())?;
        Ok(sum)
    }

    /// torch's `compareSet`: on a present key equal to `expected`, store `desired`; on an
    /// absent key with an empty `expected`, store `desired`. Answers the value now stored
    /// (and, for an absent key with a non-empty `expected`, `expected` itself, as torch
    /// does).
    pub(crate) fn compare_set(
        &mut self,
        key: &[u8],
        expected: Vec<u8>,
        desired: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        match self.entries.get(key) {
            None if expected.is_empty() => {
                self.set(key, desired.clone())?;
                Ok(desired)
            }
            None => Ok(expected),
            Some(current) if *current == expected => {
                self.set(key, desired.clone())?;
                Ok(desired)
            }
            Some(current) => Ok(current.clone()),
        }
    }

    pub(crate) fn append(&mut self, key: &[u8], tail: &[u8]) -> Result<(), String> {
        let mut value = self.entries.get(key).cloned().unwrap_or_default();
        value.extend_from_slice(tail);
        self.set(key, value)
    }

    pub(crate) fn delete(&mut self, key: &[u8]) -> bool {
        match self.entries.remove(key) {
            Some(value) => {
                self.bytes -= key.len() + value.len();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_compare_set_and_the_size_cap_behave_like_torchs_store() {
        let mut kv = Kv::default();
        assert_eq!(kv.add(b"c", 5), Ok(5));
        assert_eq!(kv.add(b"c", -7), Ok(-2));
        assert_eq!(kv.get(b"c").unwrap(), b"-2");
        kv.set(b"t", b"text".to_vec()).unwrap();
        assert!(kv.add(b"t", 1).is_err());
        kv.set(b"m", i64::MAX.to_string().into_bytes()).unwrap();
        assert!(kv.add(b"m", 1).is_err());
        assert_eq!(
            kv.compare_set(b"n", vec![], b"first".to_vec()),
            Ok(b"first".to_vec())
        );
        assert_eq!(
            kv.compare_set(b"x", b"e".to_vec(), b"d".to_vec()),
            Ok(b"e".to_vec())
        );
        assert!(kv.get(b"x").is_none());
        assert_eq!(
            kv.compare_set(b"n", b"no".to_vec(), b"d".to_vec()),
            Ok(b"first".to_vec())
        );
        assert_eq!(
            kv.compare_set(b"n", b"first".to_vec(), b"d".to_vec()),
            Ok(b"d".to_vec())
        );
        assert!(kv.delete(b"n") && !kv.delete(b"n"));
        assert!(kv.set(b"big", vec![0; MAX_STORE_BYTES]).is_err());
        let before = kv.bytes;
        kv.append(b"t", b"!").unwrap();
        assert_eq!(
            (kv.get(b"t").unwrap().as_slice(), kv.bytes),
            (&b"text!"[..], before + 1)
        );
    }
}
