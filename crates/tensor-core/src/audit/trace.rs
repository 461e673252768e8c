//! One audit record per line: the trace file format (version 1), written and parsed here
//! and nowhere else. Fields are separated by tabs (shown as two spaces below).
//!
//! ```text
//! # ditto-audit trace v1
//! # stream<TAB>seq<TAB>op<TAB>location<TAB>device<TAB>inputs<TAB>output<TAB>rng
//! main  0  matmul  crates/nn-mini/src/layers/linear.rs:124:29  cpu  f32[128,64]:9c0b4ed3a1f2e807;f32[64,256]:...  f32[128,256]:5e61...  -
//! ```
//!
//! * `stream`: the recording thread's stream (`main`; a data-loader batch such as
//!   `loader/000000000000002a.0/e0/b17`: the loader key's seed and offset, the epoch and
//!   the batch; or a name set with [`super::stream`]); `seq` counts the stream's ops
//!   from 0.
//! * `op`: the op's name; `location`: `file:line:column` of the call (`#[track_caller]`);
//!   `device`: where the output lives (`cpu`, `cuda:0`): informational, never compared.
//! * `inputs` / `output`: `dtype[d0,d1,..]:hash` per tensor, inputs separated by `;`
//!   (`-` for none); `hash` is 16 hex digits of XXH64 over the elements (see
//!   [`super::hash`]). An in-place op's inputs are hashed before it runs.
//! * `rng`: `-`, or for a random op `device,seed,offset,blocks`: the generator's device,
//!   its seed, the offset (in Philox blocks) it reserved from and the blocks consumed.
//!
//! Lines starting with `#` are comments. Fields never contain tabs or newlines.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use crate::{DType, Device};

/// The first line of every trace.
pub const HEADER: &str = "# ditto-audit trace v1";
/// The second line: the field names.
pub const FIELDS: &str = "# stream\tseq\top\tlocation\tdevice\tinputs\toutput\trng";

/// A tensor as the audit sees it: dtype, dims and content hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorDigest {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub dims: Vec<usize>,
    /// XXH64 of the elements in row-major order.
    pub hash: u64,
}

impl fmt::Display for TensorDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]:{:016x}", self.hash)
    }
}

/// A random op's reservation: which generator stream it read and how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RngRecord {
    /// The generator's device.
    pub device: Device,
    /// The generator's seed.
    pub seed: u64,
    /// The offset (Philox blocks) the op reserved from.
    pub offset: u64,
    /// Blocks the op consumed.
    pub blocks: u64,
}

impl fmt::Display for RngRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{}",
            self.device, self.seed, self.offset, self.blocks
        )
    }
}

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The recording stream.
    pub stream: String,
    /// Position in the stream, from 0.
    pub seq: u64,
    /// The op.
    pub op: String,
    /// `file:line:column` of the call.
    pub location: String,
    /// Where the output lives.
    pub device: String,
    /// The inputs, in the op's argument order.
    pub inputs: Vec<TensorDigest>,
    /// The output (`None` for an op without one).
    pub output: Option<TensorDigest>,
    /// A random op's reservation.
    pub rng: Option<RngRecord>,
}

/// Replaces the characters that would break a line's fields.
pub(crate) fn clean(field: &str) -> String {
    field.replace(['\t', '\n', '\r'], " ")
}

impl fmt::Display for Record {
    /// The record's line, without the newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}\t",
            clean(&self.stream),
            self.seq,
            clean(&self.op),
            clean(&self.location),
            self.device
        )?;
        if self.inputs.is_empty() {
            f.write_char('-')?;
        }
        for (i, input) in self.inputs.iter().enumerate() {
            if i > 0 {
                f.write_char(';')?;
            }
            write!(f, "{input}")?;
        }
        match &self.output {
            Some(output) => write!(f, "\t{output}\t")?,
            None => f.write_str("\t-\t")?,
        }
        match &self.rng {
            Some(rng) => write!(f, "{rng}"),
            None => f.write_char('-'),
        }
    }
}

fn bad(what: &str, text: &str) -> String {
    format!("bad {what} {text:?}")
}

impl FromStr for TensorDigest {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (shape, hash) = text.rsplit_once(':').ok_or_else(|| bad("tensor", text))?;
        let (dtype, dims) = shape
            .strip_suffix(']')
            .and_then(|s| s.split_once('['))
            .ok_or_else(|| bad("tensor", text))?;
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.as_str() == dtype)
            .ok_or_else(|| bad("dtype", dtype))?;
        let dims = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split(',')
                .map(|d| d.parse().map_err(|_| bad("dims", text)))
                .collect::<Result<_, _>>()?
        };
        let hash = u64::from_str_radix(hash, 16).map_err(|_| bad("hash", hash))?;
        Ok(TensorDigest { dtype, dims, hash })
    }
}

impl FromStr for RngRecord {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(',').collect();
        let [device, seed, offset, blocks] = parts[..] else {
            return Err(bad("rng field (expected device,seed,offset,blocks)", text));
        };
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad("rng number", s));
        Ok(RngRecord {
            device: device.parse().map_err(|_| bad("device", device))?,
            seed: number(seed)?,
            offset: number(offset)?,
            blocks: number(blocks)?,
        })
    }
}

impl FromStr for Record {
    type Err = String;

    /// Parses a line written by [`Record`]'s `Display` (no newline).
    fn from_str(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let [stream, seq, op, location, device, inputs, output, rng] = fields[..] else {
            return Err(format!(
                "expected 8 tab-separated fields, got {}",
                fields.len()
            ));
        };
        let inputs = match inputs {
            "-" => Vec::new(),
            list => list.split(';').map(str::parse).collect::<Result<_, _>>()?,
        };
        Ok(Record {
            stream: stream.to_string(),
            seq: seq.parse().map_err(|_| bad("seq", seq))?,
            op: op.to_string(),
            location: location.to_string(),
            device: device.to_string(),
            inputs,
            output: match output {
                "-" => None,
                o => Some(o.parse()?),
            },
            rng: match rng {
                "-" => None,
                r => Some(r.parse()?),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let digest = |dims: Vec<usize>, hash| TensorDigest {
            dtype: DType::F32,
            dims,
            hash,
        };
        let record = Record {
            stream: "loader/ab/e0/b3".into(),
            seq: 17,
            op: "index_add".into(),
            location: "src/model.rs:40:17".into(),
            device: "cuda:1".into(),
            inputs: vec![digest(vec![4, 2], 1), digest(vec![], u64::MAX)],
            output: Some(digest(vec![0], 0xabc)),
            rng: Some(RngRecord {
                device: Device::Cuda(1),
                seed: 7,
                offset: 12,
                blocks: 3,
            }),
        };
        let line = record.to_string();
        assert_eq!(
            line,
            "loader/ab/e0/b3\t17\tindex_add\tsrc/model.rs:40:17\tcuda:1\t\
             f32[4,2]:0000000000000001;f32[]:ffffffffffffffff\tf32[0]:0000000000000abc\tcuda:1,7,12,3"
        );
        assert_eq!(line.parse::<Record>().unwrap(), record);
        let bare = Record {
            inputs: vec![],
            output: None,
            rng: None,
            ..record
        };
        assert_eq!(bare.to_string().parse::<Record>().unwrap(), bare);
        assert!("main\t1\tadd".parse::<Record>().is_err());
        assert!("x\ty\tz\tl\tcpu\t-\tf99[1]:00\t-"
            .parse::<Record>()
            .is_err());
    }
}
