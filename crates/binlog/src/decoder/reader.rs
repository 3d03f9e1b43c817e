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
    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .offset
            .checked_add(len)
            .filter(|end| *end <= self.data.len())
            .ok_or_else(|| {
                format!(
                    "needs {len} bytes at offset {}, only {} left",
                    self.offset,
                    self.data.len() - self.offset
                )
            })?;
        let slice = &self.data[self.offset..end];
        self.offset = end;
        Ok(slice)
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
    pub(crate) fn uint_le(&mut self, len: usize) -> Result<u64, String> {
        let bytes = self.bytes(len)?;
        Ok(le_uint(bytes))
    }

    /// A MySQL length-encoded integer.
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

/// Little-endian unsigned value of up to 8 bytes.
pub(crate) fn le_uint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte))
}

/// Big-endian unsigned value of up to 8 bytes.
pub(crate) fn be_uint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte))
}
