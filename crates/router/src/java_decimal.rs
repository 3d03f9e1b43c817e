//! A DECIMAL column's value as Debezium hands it to Kafka Connect: a Java `BigDecimal` at
//! the column's scale (`decimal.handling.mode = precise`, Debezium's default). Connect's
//! `Decimal` logical type writes it as the unscaled value's two's-complement bytes
//! (`BigInteger.toByteArray()`: Base64 under `JsonConverter`'s default `decimal.format`),
//! and `Struct.toString()` and `SimpleHeaderConverter` as `BigDecimal.toString()`.
//!
//! DECIMAL has up to 65 digits, beyond any machine integer, so the digits stay text.

use std::fmt::Write as _;

/// A decimal number at a fixed scale: `(-1)^negative × digits × 10^-scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JavaDecimal {
    /// Below zero (never for zero itself: MySQL's `-0.00` is Java's `0.00`).
    negative: bool,
    /// The unscaled value's magnitude in decimal, without leading zeros (`"0"` for zero).
    digits: String,
    /// Digits after the point (the column's scale).
    scale: u8,
}

impl JavaDecimal {
    /// The value of a DECIMAL column of scale `scale` from its exact text (`-12.3400`, as the
    /// binlog decoder and the server's text protocol give it). Fewer fraction digits than
    /// the scale are padded, as Debezium rescales to the column's scale; `None` for text
    /// that is not a plain decimal or has more fraction digits than the scale.
    pub(crate) fn from_text(text: &str, scale: u8) -> Option<JavaDecimal> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let all_digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
        if (integer.is_empty() && fraction.is_empty())
            || !all_digits(integer)
            || !all_digits(fraction)
            || fraction.len() > usize::from(scale)
        {
            return None;
        }
        let mut unscaled = String::with_capacity(integer.len() + usize::from(scale));
        unscaled.push_str(integer);
        unscaled.push_str(fraction);
        unscaled.extend(std::iter::repeat_n(
            '0',
            usize::from(scale) - fraction.len(),
        ));
        let digits = unscaled.trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        Some(JavaDecimal {
            negative: negative && digits != "0",
            digits: digits.to_string(),
            scale,
        })
    }

    /// `BigDecimal.unscaledValue().toByteArray()`: the unscaled value in two's complement,
    /// big-endian, in the fewest bytes that keep its sign (zero is one zero byte).
    pub(crate) fn unscaled_bytes(&self) -> Vec<u8> {
        // The magnitude in base 256, little-endian, by schoolbook multiply-and-add.
        let mut magnitude: Vec<u8> = vec![0];
        for digit in self.digits.bytes().map(|byte| byte - b'0') {
            let mut carry = u32::from(digit);
            for limb in magnitude.iter_mut() {
                let value = u32::from(*limb) * 10 + carry;
                *limb = (value & 0xff) as u8;
                carry = value >> 8;
            }
            while carry > 0 {
                magnitude.push((carry & 0xff) as u8);
                carry >>= 8;
            }
        }
        while magnitude.len() > 1 && magnitude.last() == Some(&0) {
            magnitude.pop();
        }
        if self.negative {
            // Two's complement: invert, add one.
            let mut carry = 1u16;
            for limb in magnitude.iter_mut() {
                let value = u16::from(!*limb) + carry;
                *limb = (value & 0xff) as u8;
                carry = value >> 8;
            }
            // The top bit must say negative; a full 0x80.. magnitude needs a 0xff byte.
            if magnitude.last().is_some_and(|top| top & 0x80 == 0) {
                magnitude.push(0xff);
            }
            // Fewest bytes: drop 0xff bytes whose next byte carries the sign already.
            while magnitude.len() > 1
                && magnitude.last() == Some(&0xff)
                && magnitude[magnitude.len() - 2] & 0x80 != 0
            {
                magnitude.pop();
            }
        } else if magnitude.last().is_some_and(|top| top & 0x80 != 0) {
            magnitude.push(0);
        }
        magnitude.reverse();
        magnitude
    }

    /// `BigDecimal.toString()`: plain when the scale is 0 or the adjusted exponent is at
    /// least -6 (`12.50`, `0.000001`), else scientific (`1E-7`, `1.00E-8`, `0E-10`).
    pub(crate) fn java_text(&self) -> String {
        let mut out = String::new();
        if self.negative {
            out.push('-');
        }
        let scale = usize::from(self.scale);
        let length = self.digits.len();
        let adjusted = length as i64 - 1 - scale as i64;
        if scale == 0 {
            out.push_str(&self.digits);
        } else if adjusted >= -6 {
            if length > scale {
                out.push_str(&self.digits[..length - scale]);
                out.push('.');
                out.push_str(&self.digits[length - scale..]);
            } else {
                out.push_str("0.");
                out.extend(std::iter::repeat_n('0', scale - length));
                out.push_str(&self.digits);
            }
        } else {
            out.push_str(&self.digits[..1]);
            if length > 1 {
                out.push('.');
                out.push_str(&self.digits[1..]);
            }
            let _ = write!(out, "E{adjusted}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(text: &str, scale: u8) -> JavaDecimal {
        JavaDecimal::from_text(text, scale).expect("a decimal")
    }

    #[test]
    fn unscaled_bytes_are_java_big_integer_bytes() {
        // BigInteger.valueOf(n).toByteArray() for each n.
        for (text, scale, bytes) in [
            ("0", 0, vec![0x00]),
            ("0.00", 2, vec![0x00]),
            ("-0.00", 2, vec![0x00]),
            ("1", 0, vec![0x01]),
            ("127", 0, vec![0x7f]),
            ("128", 0, vec![0x00, 0x80]),
            ("255", 0, vec![0x00, 0xff]),
            ("256", 0, vec![0x01, 0x00]),
            ("-1", 0, vec![0xff]),
            ("-128", 0, vec![0x80]),
            ("-129", 0, vec![0xff, 0x7f]),
            ("-256", 0, vec![0xff, 0x00]),
            ("-32768", 0, vec![0x80, 0x00]),
            ("-32769", 0, vec![0xff, 0x7f, 0xff]),
            ("12.5", 2, vec![0x04, 0xe2]),
            ("-12.5", 2, vec![0xfb, 0x1e]),
        ] {
            assert_eq!(decimal(text, scale).unscaled_bytes(), bytes, "{text}");
        }
        // 2^64 = 18446744073709551616: beyond u64, as DECIMAL(65) values are.
        assert_eq!(
            decimal("18446744073709551616", 0).unscaled_bytes(),
            vec![0x01, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            decimal("-18446744073709551616", 0).unscaled_bytes(),
            vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn text_is_java_big_decimal_to_string() {
        for (text, scale, java) in [
            ("12.5", 4, "12.5000"),
            ("-0.05", 10, "-0.0500000000"),
            ("0", 2, "0.00"),
            ("0", 0, "0"),
            ("0", 10, "0E-10"),
            ("0.000001", 6, "0.000001"),
            ("0.0000001", 7, "1E-7"),
            ("0.00000001", 10, "1.00E-8"),
            ("-0.00000001", 10, "-1.00E-8"),
            ("1234567890.0123456789", 10, "1234567890.0123456789"),
            ("-98765", 0, "-98765"),
        ] {
            assert_eq!(
                decimal(text, scale).java_text(),
                java,
                "{text} at scale {scale}"
            );
        }
    }

    #[test]
    fn text_that_is_not_a_decimal_at_the_scale_is_refused() {
        for (text, scale) in [("", 2), ("-", 2), ("1.234", 2), ("1e5", 0), ("1.2.3", 4)] {
            assert_eq!(JavaDecimal::from_text(text, scale), None, "{text}");
        }
    }
}
