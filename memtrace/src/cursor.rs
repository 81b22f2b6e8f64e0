//! Bounds-checked little-endian reads over a slice: every read past the end is an error.

use crate::error::Problem;

#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Problem> {
        if self.remaining() < n {
            return Err(Problem::PastEnd);
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Problem> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }

    pub fn u8(&mut self) -> Result<u8, Problem> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Problem> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, Problem> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, Problem> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn f64(&mut self) -> Result<f64, Problem> {
        Ok(f64::from_bits(self.u64()?))
    }

    /// memtrace's variable-length integer: one byte below 253, else a tag and 2, 4 or 8 bytes.
    /// The 4- and 8-byte forms are signed (memtrace writes negative numbers that way).
    pub fn vint(&mut self) -> Result<i64, Problem> {
        Ok(match self.u8()? {
            small @ 0..=252 => small as i64,
            253 => self.u16()? as i64,
            254 => self.u32()? as i32 as i64,
            _ => self.u64()? as i64,
        })
    }

    /// A vint that must not be negative (lengths, counts).
    pub fn count(&mut self, what: &'static str) -> Result<u64, Problem> {
        let value = self.vint()?;
        u64::try_from(value).map_err(|_| Problem::Negative(what))
    }

    /// A NUL-terminated string, without its NUL.
    pub fn cstr(&mut self) -> Result<&'a [u8], Problem> {
        let rest = &self.data[self.pos..];
        let len = rest.iter().position(|&b| b == 0).ok_or(Problem::PastEnd)?;
        self.pos += len + 1;
        Ok(&rest[..len])
    }
}
