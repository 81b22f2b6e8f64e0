//! A reader of OCaml's marshalled values (`output_value`, runtime/extern.c and intern.c), for
//! the sections of a bytecode file that the compiler writes that way: the table of globals
//! (`SYMB`) and the debug events (`DBUG`). No crate reads this format; it is small, and read
//! here into a flat arena with shared objects kept shared, without recursion (a hostile
//! file cannot overflow the stack) and with every length checked against the input.

use std::fmt;

const MAGIC_SMALL: u32 = 0x8495_A6BE;
const MAGIC_BIG: u32 = 0x8495_A6BF;
const MAGIC_COMPRESSED: u32 = 0x8495_A6BD;

/// The most objects read: a bytecode file's debug events are a few million words at most.
const MAX_OBJECTS: usize = 1 << 26;

/// A value: an immediate, or an object of the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Object(u32),
}

/// An object of the arena.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A block: its tag and its fields (in [`Marshalled::fields`]).
    Block {
        tag: u8,
        first: u32,
        len: u32,
    },
    String(Vec<u8>),
    /// A float, a float array, a custom block or a code pointer: nothing this reader needs.
    Opaque,
}

/// Why a marshalled value could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarshalError(pub String);

impl fmt::Display for MarshalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad marshalled data: {}", self.0)
    }
}

impl std::error::Error for MarshalError {}

fn bad<T>(why: impl Into<String>) -> Result<T, MarshalError> {
    Err(MarshalError(why.into()))
}

/// A value read, with the objects it reaches.
#[derive(Debug, Default)]
pub struct Marshalled {
    pub objects: Vec<Object>,
    pub fields: Vec<Value>,
    pub root: Option<Value>,
}

impl Marshalled {
    /// The block `v` is, as (tag, fields).
    pub fn block(&self, v: Value) -> Option<(u8, &[Value])> {
        match v {
            Value::Object(i) => match self.objects.get(i as usize)? {
                Object::Block { tag, first, len } => Some((*tag, self.fields.get(*first as usize..(*first + *len) as usize)?)),
                _ => None,
            },
            Value::Int(_) => None,
        }
    }

    /// The string `v` is.
    pub fn string(&self, v: Value) -> Option<&[u8]> {
        match v {
            Value::Object(i) => match self.objects.get(i as usize)? {
                Object::String(s) => Some(s),
                _ => None,
            },
            Value::Int(_) => None,
        }
    }

    /// Field `n` of block `v`.
    pub fn field(&self, v: Value, n: usize) -> Option<Value> {
        self.block(v)?.1.get(n).copied()
    }

    pub fn int(&self, v: Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(i),
            Value::Object(_) => None,
        }
    }
}

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], MarshalError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => bad(format!("{n} bytes wanted at {} of {}", self.at, self.bytes.len())),
        }
    }

    fn u8(&mut self) -> Result<u8, MarshalError> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, MarshalError> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn signed(&mut self, n: usize) -> Result<i64, MarshalError> {
        let shift = 64 - 8 * n as u32;
        Ok(((self.be(n)? << shift) as i64) >> shift)
    }
}

/// Reads one marshalled value at the start of `bytes`.
pub fn unmarshal(bytes: &[u8]) -> Result<Marshalled, MarshalError> {
    let mut input = Input { bytes, at: 0 };
    let magic = input.be(4)? as u32;
    let data_len = match magic {
        MAGIC_SMALL => {
            let len = input.be(4)?;
            input.take(12)?;
            len
        }
        MAGIC_BIG => {
            input.take(4)?;
            let len = input.be(8)?;
            input.take(16)?;
            len
        }
        MAGIC_COMPRESSED => return bad("compressed marshalled data"),
        other => return bad(format!("magic number {other:#x}")),
    };
    let end = usize::try_from(data_len).ok().and_then(|l| input.at.checked_add(l)).filter(|&e| e <= bytes.len());
    let Some(end) = end else { return bad(format!("{data_len} bytes of data past the input")) };
    let mut input = Input { bytes: &bytes[..end], at: input.at };
    let mut out = Marshalled::default();
    // Blocks whose fields are still being read: (object, next field, field count).
    let mut pending: Vec<(u32, u32, u32)> = Vec::new();
    out.root = Some(read_item(&mut input, &mut out, &mut pending)?);
    while let Some(&(object, next, count)) = pending.last() {
        if next == count {
            pending.pop();
            continue;
        }
        let top = pending.len() - 1;
        pending[top].1 += 1;
        // Reading the field may push a block of its own, whose fields come next.
        let value = read_item(&mut input, &mut out, &mut pending)?;
        let Object::Block { first, .. } = out.objects[object as usize] else { unreachable!("pending objects are blocks") };
        out.fields[(first + next) as usize] = value;
    }
    Ok(out)
}

/// Reads one item: an immediate, a shared reference, or a new object (a block with fields
/// is pushed on `pending` and its value returned at once, its fields read next).
fn read_item(input: &mut Input<'_>, out: &mut Marshalled, pending: &mut Vec<(u32, u32, u32)>) -> Result<Value, MarshalError> {
    let code = input.u8()?;
    let new_object = |out: &mut Marshalled, object: Object| -> Result<Value, MarshalError> {
        if out.objects.len() >= MAX_OBJECTS {
            return bad("too many objects");
        }
        out.objects.push(object);
        Ok(Value::Object((out.objects.len() - 1) as u32))
    };
    // Every field takes at least a byte of input: a block cannot have more fields than that.
    let left = (input.bytes.len() - input.at) as u64;
    let block = |out: &mut Marshalled, pending: &mut Vec<(u32, u32, u32)>, tag: u8, size: u64| -> Result<Value, MarshalError> {
        if size == 0 {
            return Ok(Value::Int(0)); // an atom: never shared, not counted
        }
        if size > left {
            return bad(format!("a block of {size} fields in {left} bytes"));
        }
        let first = out.fields.len() as u32;
        out.fields.extend(std::iter::repeat_n(Value::Int(0), size as usize));
        let v = new_object(out, Object::Block { tag, first, len: size as u32 })?;
        let Value::Object(index) = v else { unreachable!() };
        pending.push((index, 0, size as u32));
        Ok(v)
    };
    match code {
        0x80..=0xFF => block(out, pending, code & 0xF, ((code >> 4) & 0x7) as u64),
        0x40..=0x7F => Ok(Value::Int((code & 0x3F) as i64)),
        0x20..=0x3F => {
            let s = input.take((code & 0x1F) as usize)?.to_vec();
            new_object(out, Object::String(s))
        }
        0x00 => Ok(Value::Int(input.signed(1)?)),
        0x01 => Ok(Value::Int(input.signed(2)?)),
        0x02 => Ok(Value::Int(input.signed(4)?)),
        0x03 => Ok(Value::Int(input.signed(8)?)),
        0x04 | 0x05 | 0x06 | 0x14 => {
            let n = match code {
                0x04 => 1,
                0x05 => 2,
                0x06 => 4,
                _ => 8,
            };
            let offset = input.be(n)?;
            match (out.objects.len() as u64).checked_sub(offset).filter(|_| offset > 0) {
                Some(i) => Ok(Value::Object(i as u32)),
                None => bad(format!("a shared reference {offset} back of {} objects", out.objects.len())),
            }
        }
        0x08 => {
            let header = input.be(4)?;
            block(out, pending, (header & 0xFF) as u8, header >> 10)
        }
        0x13 => {
            let header = input.be(8)?;
            block(out, pending, (header & 0xFF) as u8, header >> 10)
        }
        0x09 | 0x0A | 0x15 => {
            let len = input.be(match code {
                0x09 => 1,
                0x0A => 4,
                _ => 8,
            })?;
            let len = usize::try_from(len).map_err(|_| MarshalError(format!("a string of {len} bytes")))?;
            let s = input.take(len)?.to_vec();
            new_object(out, Object::String(s))
        }
        0x0B | 0x0C => {
            input.take(8)?;
            new_object(out, Object::Opaque)
        }
        0x0D | 0x0E | 0x07 | 0x0F | 0x16 | 0x17 => {
            let n = match code {
                0x0D | 0x0E => input.be(1)?,
                0x07 | 0x0F => input.be(4)?,
                _ => input.be(8)?,
            };
            let bytes = usize::try_from(n).ok().and_then(|n| n.checked_mul(8)).ok_or_else(|| MarshalError(format!("{n} floats")))?;
            input.take(bytes)?;
            new_object(out, Object::Opaque)
        }
        0x10 => {
            input.take(4 + 16)?;
            Ok(Value::Int(0))
        }
        0x11 => bad("an infix pointer"),
        0x18 | 0x19 => {
            let name_end =
                input.bytes[input.at..].iter().position(|&b| b == 0).ok_or_else(|| MarshalError("a custom block's name".into()))?;
            let name = input.take(name_end + 1)?.to_vec();
            let size = match code {
                0x18 => {
                    input.take(4)?;
                    input.be(8)?
                }
                _ => match &name[..name.len() - 1] {
                    b"_i" => 4,
                    b"_j" | b"_n" => 8,
                    other => return bad(format!("the fixed-size custom block {}", String::from_utf8_lossy(other))),
                },
            };
            let size = usize::try_from(size).map_err(|_| MarshalError(format!("a custom block of {size} bytes")))?;
            input.take(size)?;
            new_object(out, Object::Opaque)
        }
        other => bad(format!("code {other:#x} at {}", input.at - 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Marshal.to_string (("ab", 3), [ [|1|] ]) []`, as OCaml 5.3 writes it.
    fn sample() -> Vec<u8> {
        // Body: a block tag 0 size 2 -> ( block tag 0 size 2 -> ("ab", 3), block tag 0 size 2 ->
        // (block tag 0 size 1 -> (1), 0) ).
        let body: Vec<u8> = vec![0xA0, 0xA0, 0x22, b'a', b'b', 0x43, 0xA0, 0x90, 0x41, 0x40];
        let mut v = Vec::new();
        v.extend_from_slice(&MAGIC_SMALL.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(&[0; 12]);
        v.extend_from_slice(&body);
        v
    }

    #[test]
    fn blocks_strings_and_ints_are_read_in_place() {
        let m = unmarshal(&sample()).unwrap();
        let root = m.root.unwrap();
        let pair = m.field(root, 0).unwrap();
        assert_eq!(m.string(m.field(pair, 0).unwrap()), Some(&b"ab"[..]));
        assert_eq!(m.field(pair, 1), Some(Value::Int(3)));
        let list = m.field(root, 1).unwrap();
        let array = m.field(list, 0).unwrap();
        assert_eq!(m.block(array).map(|(t, f)| (t, f.to_vec())), Some((0, vec![Value::Int(1)])));
        assert_eq!(m.field(list, 1), Some(Value::Int(0)));
    }

    #[test]
    fn shared_objects_stay_shared() {
        // (s, s) where s = "x": the second field refers back one object.
        let body: Vec<u8> = vec![0xA0, 0x21, b'x', 0x04, 0x01];
        let mut v = MAGIC_SMALL.to_be_bytes().to_vec();
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(&[0; 12]);
        v.extend_from_slice(&body);
        let m = unmarshal(&v).unwrap();
        let root = m.root.unwrap();
        assert_eq!(m.field(root, 0), m.field(root, 1));
    }

    proptest::proptest! {
        /// Any body after a valid header: read or refused, never a panic or a hang.
        #[test]
        fn any_body_is_read_or_refused(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut v = MAGIC_SMALL.to_be_bytes().to_vec();
            v.extend_from_slice(&(body.len() as u32).to_be_bytes());
            v.extend_from_slice(&[0; 12]);
            v.extend_from_slice(&body);
            let _ = unmarshal(&v);
        }
    }

    #[test]
    fn truncated_or_hostile_input_is_an_error() {
        let good = sample();
        for cut in 0..good.len() {
            assert!(unmarshal(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut backwards = good.clone();
        backwards[20 + 2] = 0x04; // a shared reference where "ab" was
        assert!(unmarshal(&backwards).is_err());
        let mut huge = good;
        huge[20] = 0x13; // a 64-bit block header claiming more fields than bytes
        assert!(unmarshal(&huge).is_err());
    }
}
