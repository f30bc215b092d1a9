//! XML's lexical rules as the reader applies them to what quick-xml hands it: the characters
//! XML allows, names, the five entity references and character references, attribute lists
//! and their values, the XML declaration and the DOCTYPE (an external ID at most, no internal
//! subset).

use std::borrow::Cow;

/// The offset of the first byte that is not UTF-8 or is a character XML forbids (C0 controls
/// but tab, LF, CR; U+FFFE / U+FFFF; surrogates cannot be UTF-8).
pub(super) fn forbidden_character(doc: &[u8]) -> Option<usize> {
    if let Err(err) = std::str::from_utf8(doc) {
        return Some(err.valid_up_to());
    }
    // Blocks without a control byte or 0xEF (the lead byte of U+FFFE / U+FFFF) pass at once;
    // the flag is computed without branches so that it vectorizes.
    const BLOCK: usize = 256;
    for (number, block) in doc.chunks(BLOCK).enumerate() {
        let suspect = block.iter().fold(false, |flag, &b| {
            flag | ((b < 0x20) & (b != b'\t') & (b != b'\n') & (b != b'\r')) | (b == 0xEF)
        });
        if !suspect {
            continue;
        }
        for (i, &b) in block.iter().enumerate() {
            let at = number * BLOCK + i;
            if b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r') {
                return Some(at);
            }
            if b == 0xEF
                && doc.get(at + 1) == Some(&0xBF)
                && matches!(doc.get(at + 2), Some(0xBE | 0xBF))
            {
                return Some(at);
            }
        }
    }
    None
}

pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// An XML name (XML 1.0, fifth edition).
pub(super) fn is_name(name: &[u8]) -> bool {
    if name.is_ascii() {
        return name
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'_' | b':'))
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'));
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start) && chars.all(|c| is_name_start(c) || is_name_rest(c))
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic()
        || matches!(c, ':' | '_' | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}' | '\u{F8}'..='\u{2FF}')
        || matches!(c, '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}' | '\u{200C}'..='\u{200D}')
        || matches!(c, '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}' | '\u{3001}'..='\u{D7FF}')
        || matches!(c, '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}' | '\u{10000}'..='\u{EFFFF}')
}

fn is_name_rest(c: char) -> bool {
    c.is_ascii_digit()
        || matches!(c, '-' | '.' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
}

fn is_xml_char(code: u32) -> bool {
    matches!(code, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// The character a reference (what is between '&' and ';') stands for, if XML allows it.
pub(super) fn resolve(reference: &[u8]) -> Option<char> {
    match reference {
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"amp" => Some('&'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        _ => {
            let number = reference.strip_prefix(b"#")?;
            let (digits, radix) = match number.strip_prefix(b"x") {
                Some(hex) => (hex, 16),
                None => (number, 10),
            };
            if digits.is_empty() || digits.len() > 8 {
                return None;
            }
            let code = u32::from_str_radix(std::str::from_utf8(digits).ok()?, radix).ok()?;
            if digits.iter().any(|b| !b.is_ascii_hexdigit()) || !is_xml_char(code) {
                return None;
            }
            char::from_u32(code)
        }
    }
}

/// Why a reference is refused.
pub(super) fn unknown_reference(reference: &[u8]) -> String {
    format!(
        "the reference &{}; is neither one of XML's five nor a character XML allows \
         (entity declarations are not accepted)",
        String::from_utf8_lossy(reference)
    )
}

/// Appends an attribute value decoded: references resolved, white space made spaces (CR LF as
/// one); `out` is left alone when the value is not allowed.
fn decode_value(value: &[u8], out: &mut String) -> Result<(), String> {
    let special = |b: &u8| matches!(b, b'<' | b'&' | b'\r' | b'\n' | b'\t');
    if !value.iter().any(special) {
        out.push_str(std::str::from_utf8(value).map_err(|_| "an attribute value not UTF-8")?);
        return Ok(());
    }
    let mut bytes = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        match value[i] {
            b'<' => return Err("'<' in an attribute value".to_owned()),
            b'&' => {
                let tail = &value[i + 1..];
                let end = tail
                    .iter()
                    .position(|&b| b == b';')
                    .ok_or("an '&' that starts no reference in an attribute value")?;
                let ch = resolve(&tail[..end]).ok_or_else(|| unknown_reference(&tail[..end]))?;
                bytes.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                i += end + 2;
                continue;
            }
            b'\r' => {
                bytes.push(b' ');
                if value.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
            }
            b'\n' | b'\t' => bytes.push(b' '),
            b => bytes.push(b),
        }
        i += 1;
    }
    out.push_str(std::str::from_utf8(&bytes).map_err(|_| "an attribute value not UTF-8")?);
    Ok(())
}

/// Appends text with its line ends normalized (CR LF and CR as LF).
pub(super) fn push_text(text: &[u8], out: &mut String) -> Result<(), String> {
    let text = std::str::from_utf8(text).map_err(|_| "text not UTF-8")?;
    if !text.contains('\r') {
        out.push_str(text);
        return Ok(());
    }
    out.push_str(&text.replace("\r\n", "\n").replace('\r', "\n"));
    Ok(())
}

/// The attributes of a start tag, checked: `(S name S? = S? "value")* S?`, no name twice,
/// values allowed (`scratch` holds the last one decoded).
pub(super) fn attributes<'a>(
    raw: &'a [u8],
    out: &mut Vec<(&'a [u8], &'a [u8])>,
    scratch: &mut String,
) -> Result<(), String> {
    out.clear();
    let mut i = 0;
    loop {
        let before = i;
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        if i == raw.len() {
            return Ok(());
        }
        if i == before {
            return Err("attributes not separated by white space".to_owned());
        }
        let name_start = i;
        while i < raw.len() && !is_space(raw[i]) && raw[i] != b'=' {
            i += 1;
        }
        let name = &raw[name_start..i];
        if !is_name(name) {
            return Err(format!(
                "{:?} is not an attribute name",
                String::from_utf8_lossy(name)
            ));
        }
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        let quote = if raw.get(i) == Some(&b'=') {
            i += 1;
            while i < raw.len() && is_space(raw[i]) {
                i += 1;
            }
            raw.get(i).copied().filter(|&q| q == b'"' || q == b'\'')
        } else {
            None
        };
        let unquoted = || {
            format!(
                "the attribute {} has no '=' and quoted value",
                String::from_utf8_lossy(name)
            )
        };
        let quote = quote.ok_or_else(unquoted)?;
        let len = raw[i + 1..]
            .iter()
            .position(|&b| b == quote)
            .ok_or_else(unquoted)?;
        let value = &raw[i + 1..i + 1 + len];
        i += len + 2;
        if out.iter().any(|(n, _)| same(n, name)) {
            return Err(format!(
                "the attribute {} given twice",
                String::from_utf8_lossy(name)
            ));
        }
        if value.iter().any(|&b| matches!(b, b'<' | b'&')) {
            scratch.clear();
            decode_value(value, scratch)?;
        }
        out.push((name, value));
    }
}

pub(super) fn attribute<'a>(attrs: &[(&'a [u8], &'a [u8])], name: &[u8]) -> Option<&'a [u8]> {
    attrs.iter().find(|(n, _)| same(n, name)).map(|(_, v)| *v)
}

/// An attribute's value decoded, if it is there.
pub(super) fn decoded<'a>(attrs: &[(&'a [u8], &'a [u8])], name: &[u8]) -> Option<Cow<'a, str>> {
    let value = attribute(attrs, name)?;
    let special = |b: &u8| matches!(b, b'&' | b'\r' | b'\n' | b'\t');
    if !value.iter().any(special) {
        return std::str::from_utf8(value).ok().map(Cow::Borrowed);
    }
    let mut out = String::new();
    decode_value(value, &mut out).ok()?;
    Some(Cow::Owned(out))
}

/// Short names compared in line (a call to memcmp costs more than they do).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `<?xml version="1.x" [encoding="UTF-8"] [standalone="yes|no"]?>`: what is inside `<?...?>`.
pub(super) fn declaration_ok(content: &[u8]) -> bool {
    let Some(mut rest) = content.strip_prefix(b"xml") else {
        return false;
    };
    let mut seen = 0;
    let names: [&[u8]; 3] = [b"version", b"encoding", b"standalone"];
    loop {
        let trimmed = trim_start(rest);
        if trimmed.is_empty() {
            return seen > 0;
        }
        if trimmed.len() == rest.len() {
            return false;
        }
        rest = trimmed;
        let Some(index) = names.iter().position(|n| rest.starts_with(n)) else {
            return false;
        };
        if index < seen || (seen == 0 && index != 0) {
            return false;
        }
        seen = index + 1;
        rest = trim_start(&rest[names[index].len()..]);
        let Some(after) = rest.strip_prefix(b"=") else {
            return false;
        };
        rest = trim_start(after);
        let Some((&quote, after)) = rest.split_first() else {
            return false;
        };
        if quote != b'"' && quote != b'\'' {
            return false;
        }
        let Some(len) = after.iter().position(|&b| b == quote) else {
            return false;
        };
        let value = &after[..len];
        rest = &after[len + 1..];
        let ok = match index {
            0 => {
                value.len() > 2
                    && value.starts_with(b"1.")
                    && value[2..].iter().all(u8::is_ascii_digit)
            }
            1 => value.eq_ignore_ascii_case(b"utf-8"),
            _ => value == b"yes" || value == b"no",
        };
        if !ok {
            return false;
        }
    }
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .iter()
        .position(|&b| !is_space(b))
        .unwrap_or(bytes.len());
    &bytes[at..]
}

/// `svg`, optionally `PUBLIC "pubid" "system"` or `SYSTEM "system"`, and no internal subset.
fn literal(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&quote, rest) = bytes.split_first()?;
    if quote != b'"' && quote != b'\'' {
        return None;
    }
    let len = rest.iter().position(|&b| b == quote)?;
    Some((&rest[..len], &rest[len + 1..]))
}

/// A name, optionally `PUBLIC "pubid" "system"` or `SYSTEM "system"`, and no internal subset.
pub(super) fn doctype_ok(content: &[u8]) -> bool {
    let content = trim_start(content);
    let end = content
        .iter()
        .position(|&b| is_space(b))
        .unwrap_or(content.len());
    let (name, rest) = content.split_at(end);
    if !is_name(name) {
        return false;
    }
    let trimmed = trim_start(rest);
    if trimmed.is_empty() {
        return true;
    }
    if trimmed.len() == rest.len() {
        return false;
    }
    let rest = if let Some(after) = trimmed.strip_prefix(b"PUBLIC") {
        let after_space = trim_start(after);
        if after_space.len() == after.len() {
            return false;
        }
        let Some((pubid, after)) = literal(after_space) else {
            return false;
        };
        let pubid_char = |b: &u8| {
            b.is_ascii_alphanumeric()
                || matches!(b, b' ' | b'\r' | b'\n')
                || b"-'()+,./:=?;!*#@$_%".contains(b)
        };
        if !pubid.iter().all(pubid_char) {
            return false;
        }
        after
    } else if let Some(after) = trimmed.strip_prefix(b"SYSTEM") {
        after
    } else {
        return false;
    };
    let after_space = trim_start(rest);
    if after_space.len() == rest.len() {
        return false;
    }
    match literal(after_space) {
        Some((_, tail)) => trim_start(tail).is_empty(),
        None => false,
    }
}
