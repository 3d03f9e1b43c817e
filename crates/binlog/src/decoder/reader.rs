//! A bounds-checked cursor over event bytes: every read returns an error message instead of
//! panicking when the bytes run out.

/// Reads little-endian integers, length-encoded integers and byte slices from a slice.
pub(crate) struct ByteReader<'a> {
    /// The bytes being read.
    data: &'a [u8],
    /// How many bytes were consumed.
    offset: usize,
}

impl<'a> ByteReader<'a> {
    /// Starts reading at the beginning of `data`.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, offset: 0 }
    }

    /// Bytes consumed so far.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The bytes not consumed yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.data[self.offset..]
    }

    /// Consumes `len` bytes and returns them.
    #[inline]
    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], String> {
        match self
            .data
            .get(self.offset..)
            .and_then(|rest| rest.get(..len))
        {
            Some(slice) => {
                self.offset += len;
                Ok(slice)
            }
            None => Err(self.too_short(len)),
        }
    }

    /// The error for a read of `len` bytes past the end (out of line: the hot path only
    /// compares lengths).
    #[cold]
    #[inline(never)]
    fn too_short(&self, len: usize) -> String {
        format!(
            "needs {len} bytes at offset {}, only {} left",
            self.offset,
            self.data.len().saturating_sub(self.offset)
        )
    }

    /// Skips `len` bytes.
    pub(crate) fn skip(&mut self, len: usize) -> Result<(), String> {
        self.bytes(len).map(|_| ())
    }

    /// One byte.
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    /// A little-endian unsigned integer of 1 to 8 bytes.
    #[inline]
    pub(crate) fn uint_le(&mut self, len: usize) -> Result<u64, String> {
        let bytes = self.bytes(len)?;
        Ok(le_uint(bytes))
    }

    /// A MySQL length-encoded integer.
    #[inline]
    pub(crate) fn lenenc(&mut self) -> Result<u64, String> {
        match self.u8()? {
            0xfc => self.uint_le(2),
            0xfd => self.uint_le(3),
            0xfe => self.uint_le(8),
            0xfb | 0xff => Err(format!(
                "invalid length-encoded integer at offset {}",
                self.offset - 1
            )),
            small => Ok(u64::from(small)),
        }
    }
}

/// Little-endian unsigned value of up to 8 bytes (longer input: its first 8 bytes).
#[inline]
pub(crate) fn le_uint(bytes: &[u8]) -> u64 {
    // Fixed-size reads for the widths row images use; the loop for the others.
    match *bytes {
        [b0] => u64::from(b0),
        [b0, b1] => u64::from(u16::from_le_bytes([b0, b1])),
        [b0, b1, b2] => u64::from(b0) | u64::from(b1) << 8 | u64::from(b2) << 16,
        [b0, b1, b2, b3] => u64::from(u32::from_le_bytes([b0, b1, b2, b3])),
        [b0, b1, b2, b3, b4, b5, b6, b7] => u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]),
        _ => bytes
            .iter()
            .take(8)
            .rev()
            .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte)),
    }
}

/// Big-endian unsigned value of up to 8 bytes.
pub(crate) fn be_uint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte))
}
