//! What every memory source is: the trait the runtime knowledge reads through
//! ([`MemorySource`], [`ReadExt`]), and the thread state it reports.

use super::maps::Mapping;
use crate::error::{DumpError, Result};
use std::path::PathBuf;

/// The general-purpose registers of one x86-64 thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rbp: u64,
    pub rsp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub fs_base: u64,
    /// The system call the thread is in (`u64::MAX` when none), its arguments in rdi, rsi...
    pub orig_rax: u64,
}

/// x86-64 `futex`, and its operations that wait (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET`).
const SYS_FUTEX: u64 = 202;
const FUTEX_CMD_MASK: u64 = 0x7f;
const FUTEX_WAITS: [u64; 2] = [0, 9];

impl Registers {
    /// Whether the thread is blocked waiting on a futex (a mutex or a condition variable).
    pub fn waiting_on_futex(&self) -> bool {
        self.orig_rax == SYS_FUTEX && FUTEX_WAITS.contains(&(self.rsi & FUTEX_CMD_MASK))
    }

    /// The registers that can hold OCaml values in OCaml code (r14 holds Caml_state and r15
    /// the allocation pointer), with their DWARF register numbers.
    pub fn ocaml_value_registers(&self) -> [(u64, u64); 13] {
        [
            (0, self.rax),
            (3, self.rbx),
            (5, self.rdi),
            (4, self.rsi),
            (1, self.rdx),
            (2, self.rcx),
            (8, self.r8),
            (9, self.r9),
            (12, self.r12),
            (13, self.r13),
            (10, self.r10),
            (11, self.r11),
            (6, self.rbp),
        ]
    }
}

/// One thread of the target, as it was when the world stopped.
#[derive(Clone, Debug)]
pub struct ThreadState {
    pub tid: u32,
    /// Its thread id in its own PID namespace, which is what the target's memory holds (a
    /// mutex's owner): in a container, not `tid`.
    pub own_tid: u32,
    pub regs: Registers,
}

/// A request of a batched read: `buf.len()` bytes at `address`.
pub struct ReadRequest<'a> {
    pub address: u64,
    pub buf: &'a mut [u8],
}

/// Target memory and threads. Implementations must be consistent while the world is stopped.
pub trait MemorySource {
    /// The target's pid, when it is a process.
    fn pid(&self) -> Option<u32>;

    /// The target's executable file.
    fn executable_path(&self) -> PathBuf;

    /// Reads `buf.len()` bytes at `address`, all or nothing.
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()>;

    /// Reads many ranges at once (implementations batch them); all or nothing.
    fn read_many(&self, requests: &mut [ReadRequest<'_>]) -> Result<()> {
        for r in requests.iter_mut() {
            self.read(r.address, r.buf)?;
        }
        Ok(())
    }

    /// Reads many ranges, some of which may be unmapped: says which were read.
    fn read_many_partial(&self, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
        requests.iter_mut().map(|r| self.read(r.address, r.buf).is_ok()).collect()
    }

    /// Every thread of the target, stopped.
    fn threads(&self) -> &[ThreadState];

    /// The target's memory mappings.
    fn mappings(&self) -> Result<Vec<Mapping>>;
}

/// Typed reads on top of any [`MemorySource`].
pub trait ReadExt: MemorySource {
    fn read_u64(&self, address: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(address, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn read_u32(&self, address: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read(address, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn read_i32(&self, address: u64) -> Result<i32> {
        Ok(self.read_u32(address)? as i32)
    }

    fn read_bytes(&self, address: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = zeroed_buffer(address, len)?;
        self.read(address, &mut v)?;
        Ok(v)
    }

    /// `count` consecutive words.
    fn read_words(&self, address: u64, count: usize) -> Result<Vec<u64>> {
        let mut words = vec![0u64; count];
        self.read(address, bytemuck_words(&mut words))?;
        Ok(words)
    }

    /// A NUL-terminated C string of at most `max` bytes.
    fn read_c_string(&self, address: u64, max: usize) -> Result<String> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        while out.len() < max {
            // Read in small steps: the string may end near the end of a mapping.
            let n = chunk.len().min(max - out.len()).min(4096 - ((address as usize + out.len()) % 4096));
            self.read(address + out.len() as u64, &mut chunk[..n])?;
            if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&chunk[..n]);
        }
        Err(DumpError::Read { address, len: max, reason: "string is not NUL-terminated".into() })
    }
}

impl<T: MemorySource + ?Sized> ReadExt for T {}

/// A zeroed buffer for `len` bytes of target memory at `address`; a clear error instead of an
/// abort when a corrupt length asks for more memory than we can have.
pub fn zeroed_buffer(address: u64, len: usize) -> Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let too_big = || DumpError::Read { address, len, reason: "more memory than the dumper can allocate (corrupt size?)".into() };
    let layout = std::alloc::Layout::array::<u8>(len).map_err(|_| too_big())?;
    // alloc_zeroed (calloc) gets fresh pages already zero from the kernel: no memset of
    // memory we are about to overwrite with target bytes anyway.
    // SAFETY: the layout has a non-zero size; on success the pointer owns `len` zeroed bytes,
    // allocated by the global allocator with the layout Vec<u8> uses for this capacity.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout);
        if ptr.is_null() {
            return Err(too_big());
        }
        Ok(Vec::from_raw_parts(ptr, len, len))
    }
}

/// The bytes of a word slice (little-endian host).
pub(crate) fn bytemuck_words(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and any byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) }
}
