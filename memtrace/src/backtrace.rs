//! memtrace's backtrace coding. A backtrace (outermost frame first) shares a prefix with the
//! previous one of its domain; the rest is a sequence of 16-bit codewords: a 14-bit slot of a
//! 16384-entry cache of location codes and a 2-bit tag. Tag 3 is a miss, followed by the code
//! that now fills the slot; tags 0, 1 and 2 are hits followed by 0, 1 or N (one more byte)
//! correctly predicted slots: each slot remembers which slot followed it last time.
//! The decoder must replay the writer's cache updates exactly.

use crate::cursor::Cursor;
use crate::error::Problem;
use crate::location::LocationCode;

pub(crate) const CACHE_SLOTS: usize = 1 << 14;

/// The sentinel slot of a packet header that carries no cache check.
const NO_VERIFICATION: u16 = 0xffff;

/// A packet header's sample of the writer's cache: one slot's content and prediction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheVerifier {
    pub slot: u16,
    pub prediction: u16,
    pub code: u64,
}

pub(crate) struct BacktraceDecoder {
    codes: Box<[LocationCode]>,
    predictions: Box<[u16]>,
    /// The last decoded backtrace, outermost frame first.
    pub backtrace: Vec<LocationCode>,
    /// Codes decoded for a backtrace whose prefix was longer than the previous backtrace.
    scratch: Vec<LocationCode>,
}

impl BacktraceDecoder {
    pub fn new() -> Self {
        BacktraceDecoder {
            codes: vec![0; CACHE_SLOTS].into_boxed_slice(),
            predictions: vec![0; CACHE_SLOTS].into_boxed_slice(),
            backtrace: Vec::new(),
            scratch: Vec::new(),
        }
    }

    pub fn verify(&self, check: CacheVerifier) -> Result<(), Problem> {
        if check.slot == NO_VERIFICATION {
            return Ok(());
        }
        let slot = check.slot as usize;
        let agrees = slot < CACHE_SLOTS && self.predictions[slot] == check.prediction && self.codes[slot] == check.code;
        if agrees {
            Ok(())
        } else {
            Err(Problem::CacheVerification { slot: check.slot })
        }
    }

    /// Decodes `codewords` codewords after `common_prefix` frames of the previous backtrace.
    /// Returns how many leading frames of the result equal the previous backtrace's.
    ///
    /// If the prefix is longer than the previous backtrace (the writer truncated that one), the
    /// cache is updated but the backtrace stays the previous one, as memtrace's reader does.
    pub fn read(&mut self, cursor: &mut Cursor<'_>, common_prefix: u64, codewords: u32) -> Result<usize, Problem> {
        let previous_len = self.backtrace.len();
        if common_prefix <= previous_len as u64 {
            let prefix = common_prefix as usize;
            self.backtrace.truncate(prefix);
            let mut out = std::mem::take(&mut self.backtrace);
            let result = self.decode(cursor, codewords, &mut out);
            self.backtrace = out;
            result.map(|()| prefix)
        } else {
            let mut out = std::mem::take(&mut self.scratch);
            out.clear();
            let result = self.decode(cursor, codewords, &mut out);
            self.scratch = out;
            result.map(|()| previous_len)
        }
    }

    fn decode(&mut self, cursor: &mut Cursor<'_>, codewords: u32, out: &mut Vec<LocationCode>) -> Result<(), Problem> {
        let mut predecessor = 0usize;
        for _ in 0..codewords {
            let codeword = cursor.u16()?;
            let slot = (codeword >> 2) as usize;
            self.predictions[predecessor] = slot as u16;
            let correct_predictions = match codeword & 3 {
                0 => 0,
                1 => 1,
                2 => cursor.u8()? as usize,
                _ => {
                    let code = cursor.u64()?;
                    self.codes[slot] = code;
                    push(out, code)?;
                    predecessor = slot;
                    continue;
                }
            };
            push(out, self.codes[slot])?;
            let mut current = slot;
            for _ in 0..correct_predictions {
                current = self.predictions[current] as usize;
                push(out, self.codes[current])?;
            }
            predecessor = current;
        }
        Ok(())
    }
}

fn push(out: &mut Vec<LocationCode>, code: LocationCode) -> Result<(), Problem> {
    if out.len() >= crate::limits::MAX_BACKTRACE {
        return Err(Problem::BacktraceTooLong);
    }
    out.push(code);
    Ok(())
}
