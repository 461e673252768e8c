//! `TextWindows`: a byte-level language-modelling dataset, random windows of a text.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use rand_core::RngCore;
use rng_gen::stream::convert::below;
use sha2::{Digest, Sha256};
use tensor_core::{Device, Tensor};

use crate::data::{Dataset, Sample, SampleRng};
use crate::{NnError, Result};

/// The bytes of a training text, their count and SHA-256 (hex): what a checkpoint
/// records of its data, so a resume can check it was given the same text.
#[derive(Clone, Debug)]
pub struct Text {
    /// A `Vec` behind the `Arc`, not an `Arc<[u8]>`: turning the `Vec` a file was read
    /// into into a slice `Arc` would copy it, two copies of a large text at once.
    bytes: Arc<Vec<u8>>,
    sha256: String,
}

/// A text read from a file, while some [`Text`] still holds its bytes: the file's path,
/// length and modification time when it was read, and the text.
struct Live {
    path: PathBuf,
    stamp: (u64, Option<SystemTime>),
    bytes: Weak<Vec<u8>>,
    sha256: String,
}

/// The texts read and still alive in this process. Reading an unchanged file again (a
/// run's loader, then its evaluation; every rank of a job on the threads backend) shares
/// the bytes instead of holding another copy, so a 1 GB text costs 1 GB per process
/// however many readers and loader workers it has.
static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());

impl Text {
    /// The bytes of `path` (any file: the tokens are its bytes, vocabulary 256). Errors
    /// when it cannot be read or is empty. A file already read by a [`Text`] that is
    /// still alive, with the same length and modification time, shares its bytes.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| NnError::Io {
            context: format!("reading the training text {}", path.display()),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let stamp = (meta.len(), meta.modified().ok());
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|l| l.bytes.strong_count() > 0);
        if let Some(l) = live.iter().find(|l| l.path == path && l.stamp == stamp) {
            if let Some(bytes) = l.bytes.upgrade() {
                return Ok(Text {
                    bytes,
                    sha256: l.sha256.clone(),
                });
            }
        }
        let bytes = std::fs::read(path).map_err(io)?;
        if bytes.is_empty() {
            return Err(NnError::invalid(
                "Text::read",
                format!(
                    "{} is empty; expected a text of at least context + 1 bytes",
                    path.display()
                ),
            ));
        }
        let text = Text::from_bytes(bytes);
        live.push(Live {
            path: path.to_path_buf(),
            stamp,
            bytes: Arc::downgrade(&text.bytes),
            sha256: text.sha256.clone(),
        });
        Ok(text)
    }

    /// A text from bytes in memory.
    #[must_use]
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        let sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Text {
            bytes: Arc::new(bytes),
            sha256,
        }
    }

    /// The bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The SHA-256 of the bytes, 64 lowercase hex digits.
    #[must_use]
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

/// Windows of `context + 1` consecutive bytes of a [`Text`]: sample `i` is a window at
/// an offset drawn from the sample's own key (the loader's `fold_in` tree:
/// `(loader key, epoch, i)`, see [`crate::data`]), its first `context` bytes the input
/// and its last `context` the target (the next byte at every position), both `[context]`
/// of i64 token indices.
///
/// An epoch is a given number of windows (a GPT run takes as many whole batches as
/// cover the text about once: [`GptTrainConfig::windows`](super::GptTrainConfig::windows)).
/// The offset is `below(w0, w1, len - context)` of the sample's first two words
/// (docs/contract.md §5.8's conversion), so it depends on the seed, the epoch and the
/// index alone: any worker count loads the same windows, and a resume mid-epoch loads
/// the ones the straight run loads.
#[derive(Clone, Debug)]
pub struct TextWindows {
    text: Text,
    /// The bytes the windows lie in (all of the text, or its training part).
    range: Range<usize>,
    context: usize,
    windows: usize,
}

impl TextWindows {
    /// Epochs of `windows` windows of `context` tokens (and their targets) over `text`.
    /// Errors when the text is shorter than `context + 1` bytes, or `context` or
    /// `windows` is 0.
    pub fn new(text: Text, context: usize, windows: usize) -> Result<Self> {
        let len = text.bytes.len();
        TextWindows::within(text, 0..len, context, windows)
    }

    /// [`new`](Self::new) over the bytes `range` of `text` only (a training split: no
    /// window reaches past `range.end`), without copying the text.
    pub fn within(text: Text, range: Range<usize>, context: usize, windows: usize) -> Result<Self> {
        if range.start > range.end || range.end > text.bytes.len() {
            return Err(NnError::invalid(
                "TextWindows::within",
                format!(
                    "bytes {range:?} of a text of {} bytes; expected a range inside it",
                    text.bytes.len()
                ),
            ));
        }
        let len = range.len();
        if windows == 0 {
            return Err(NnError::invalid(
                "TextWindows::new",
                "an epoch of 0 windows; expected at least 1",
            ));
        }
        if context == 0 || len < context + 1 {
            return Err(NnError::invalid(
                "TextWindows::new",
                format!(
                    "the text has {len} bytes, shorter than a context of {context} plus the \
                     next byte: expected at least {} bytes (and a context of at least 1)",
                    context.saturating_add(1).max(2)
                ),
            ));
        }
        Ok(TextWindows {
            text,
            range,
            context,
            windows,
        })
    }

    /// The text.
    #[must_use]
    pub fn text(&self) -> &Text {
        &self.text
    }

    /// Tokens per window.
    #[must_use]
    pub fn context(&self) -> usize {
        self.context
    }

    /// The window of `context + 1` bytes starting at `offset`, as `(input, target)` i64
    /// tensors `[context]`.
    fn window(&self, offset: usize) -> Result<Sample> {
        let offset = self.range.start + offset;
        let bytes = &self.text.bytes[offset..offset + self.context + 1];
        let tokens = |range: std::ops::Range<usize>| {
            let values = bytes[range].iter().map(|&b| i64::from(b)).collect();
            Tensor::from_vec(values, &[self.context], Device::Cpu)
        };
        Ok(Sample {
            input: tokens(0..self.context)?,
            target: tokens(1..self.context + 1)?,
        })
    }
}

impl Dataset for TextWindows {
    fn len(&self) -> usize {
        self.windows
    }

    fn get(&self, index: usize, rng: &mut SampleRng) -> Result<Sample> {
        if index >= self.len() {
            return Err(NnError::invalid(
                "TextWindows::get",
                format!("index {index} is out of range for {} windows", self.len()),
            ));
        }
        let starts = (self.range.len() - self.context) as u64;
        let offset = below(rng.next_u32(), rng.next_u32(), starts) as usize;
        self.window(offset)
    }
}

#[cfg(test)]
mod tests {
    use rng_gen::Key;

    use super::*;

    #[test]
    fn windows_are_shifted_pairs_drawn_from_the_sample_key() {
        let text = Text::from_bytes((0..=255u8).cycle().take(1000).collect());
        let windows = TextWindows::new(text, 8, 100).unwrap();
        assert_eq!(windows.len(), 100);
        let mut rng = SampleRng::from_key(Key::new(3));
        let a = windows.get(5, &mut rng).unwrap();
        let mut again = SampleRng::from_key(Key::new(3));
        let b = windows.get(5, &mut again).unwrap();
        let (x, y) = (
            a.input.to_vec::<i64>().unwrap(),
            a.target.to_vec::<i64>().unwrap(),
        );
        assert_eq!(x, b.input.to_vec::<i64>().unwrap());
        assert_eq!(&x[1..], &y[..7]);
        assert_eq!((x[0] + 8) % 256, y[7]);
    }

    #[test]
    fn short_and_empty_texts_are_refused() {
        let err = TextWindows::new(Text::from_bytes(vec![1, 2, 3]), 3, 1).unwrap_err();
        assert!(
            err.to_string()
                .contains("3 bytes, shorter than a context of 3"),
            "{err}"
        );
        assert!(TextWindows::new(Text::from_bytes(vec![1, 2, 3, 4]), 3, 1).is_ok());
        assert!(TextWindows::new(Text::from_bytes(vec![1, 2, 3, 4]), 3, 0).is_err());
        assert!(TextWindows::new(Text::from_bytes(Vec::new()), 1, 1).is_err());
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, b"").unwrap();
        let err = Text::read(&empty).unwrap_err().to_string();
        // A second read of a live, unchanged text shares its bytes; a changed file is
        // read again.
        let file = dir.path().join("text.txt");
        std::fs::write(&file, b"some words").unwrap();
        let (a, b) = (Text::read(&file).unwrap(), Text::read(&file).unwrap());
        assert!(Arc::ptr_eq(&a.bytes, &b.bytes));
        std::fs::write(&file, b"other words, longer").unwrap();
        let c = Text::read(&file).unwrap();
        assert_eq!(c.bytes(), b"other words, longer");
        assert_ne!(c.sha256(), a.sha256());
        assert!(err.contains("is empty"), "{err}");
    }
}
