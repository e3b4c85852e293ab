//! A file that is a header followed by zeros, without the zeros in memory: mutated headers
//! are opened as if their tensor data were there, so the readers get past their size
//! checks to the config and tensor checks.

use std::io::{Read, Result, Seek, SeekFrom};

pub struct Padded<'a> {
    head: &'a [u8],
    len: u64,
    pos: u64,
}

impl<'a> Padded<'a> {
    /// `head`, then zeros up to `len` bytes in all (`head` alone when it is longer).
    pub fn new(head: &'a [u8], len: u64) -> Self {
        Padded {
            head,
            len: len.max(head.len() as u64),
            pos: 0,
        }
    }
}

impl Read for Padded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        for (i, b) in buf[..n].iter_mut().enumerate() {
            let at = self.pos as usize + i;
            *b = self.head.get(at).copied().unwrap_or(0);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Padded<'_> {
    fn seek(&mut self, to: SeekFrom) -> Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}
