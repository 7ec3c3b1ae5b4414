//! The little the capture reads of an RDB: its version from the header, and whether its end
//! is there. The rest of the format is Valkey's business; restore hands the bytes to Valkey.

/// Bytes of the header: a magic word and the version in ASCII digits. Valkey up to 8.x writes
/// `REDIS` and four digits (`REDIS0011`); Valkey 9 writes `REDIS0011` while the data needs nothing
/// newer and `VALKEY` and three digits (`VALKEY080`) when it does.
pub const HEADER_LEN: usize = 9;

/// The end of every RDB: the EOF opcode and an 8-byte CRC64 of everything before it (zero when
/// the server runs with `rdbchecksum no`).
pub const TRAILER_LEN: usize = 9;
const EOF_OPCODE: u8 = 0xFF;

/// The RDB version in a header, or why it is not an RDB header.
pub fn version(header: &[u8]) -> Result<u32, String> {
    let (magic, digits) = if let Some(rest) = header.strip_prefix(b"REDIS") {
        ("REDIS", rest.get(..4))
    } else if let Some(rest) = header.strip_prefix(b"VALKEY") {
        ("VALKEY", rest.get(..3))
    } else {
        return Err(format!(
            "not an RDB: it starts with {:?}",
            String::from_utf8_lossy(&header[..header.len().min(HEADER_LEN)])
        ));
    };
    let digits = digits.ok_or_else(|| format!("RDB header cut short after {magic}"))?;
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| {
            format!(
                "RDB header {magic} with a version that is not a number: {:?}",
                String::from_utf8_lossy(digits)
            )
        })
}

/// Whether the last bytes of a payload are an RDB's end (EOF opcode, then the checksum).
pub fn ends_complete(last: &[u8]) -> bool {
    last.len() >= TRAILER_LEN && last[last.len() - TRAILER_LEN] == EOF_OPCODE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_both_magic_words() {
        assert_eq!(version(b"REDIS0011\xfa"), Ok(11));
        assert_eq!(version(b"VALKEY080"), Ok(80));
        assert!(version(b"REDIS00x1").is_err());
        assert!(version(b"HELLO0011").is_err());
        assert!(version(b"REDIS00").is_err());
    }

    #[test]
    fn complete_only_with_the_eof_opcode_nine_bytes_from_the_end() {
        assert!(ends_complete(b"xx\xff12345678"));
        assert!(!ends_complete(b"xx\xfe12345678"));
        assert!(!ends_complete(b"\xff1234567"));
    }
}
