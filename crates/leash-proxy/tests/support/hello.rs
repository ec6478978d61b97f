//! Hand-built TLS ClientHellos for the shapes no well-behaved client library sends on request: several server
//! names, an invalid one, an Encrypted Client Hello extension, a hello spread over many tiny records.

/// What to put in a crafted ClientHello.
#[derive(Debug, Clone, Default)]
pub struct HelloSpec {
    /// The server_name extension's host_name entries; `None` leaves the extension out.
    pub names: Option<Vec<Vec<u8>>>,
    /// Add an encrypted_client_hello (0xfe0d) extension.
    pub ech: bool,
    /// Largest record fragment; 0 means one record.
    pub record_size: usize,
}

/// A ClientHello naming `name` (SNI), in one record.
pub fn client_hello(name: &str) -> Vec<u8> {
    HelloSpec::sni(&[name]).bytes()
}

impl HelloSpec {
    pub fn sni(names: &[&str]) -> HelloSpec {
        HelloSpec { names: Some(names.iter().map(|n| n.as_bytes().to_vec()).collect()), ..HelloSpec::default() }
    }

    pub fn raw_names(names: Vec<Vec<u8>>) -> HelloSpec {
        HelloSpec { names: Some(names), ..HelloSpec::default() }
    }

    pub fn no_sni() -> HelloSpec {
        HelloSpec::default()
    }

    pub fn with_ech(mut self) -> HelloSpec {
        self.ech = true;
        self
    }

    pub fn in_records_of(mut self, size: usize) -> HelloSpec {
        self.record_size = size;
        self
    }

    /// The records on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        let body = self.body();
        let mut message = vec![1u8]; // client_hello
        message.extend_from_slice(&u24(body.len()));
        message.extend_from_slice(&body);
        let size = if self.record_size == 0 { message.len() } else { self.record_size };
        let mut out = Vec::new();
        for fragment in message.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]); // handshake, legacy record version TLS 1.0
            out.extend_from_slice(&u16b(fragment.len()));
            out.extend_from_slice(fragment);
        }
        out
    }

    fn body(&self) -> Vec<u8> {
        let mut b = vec![3, 3]; // legacy_version TLS 1.2
        b.extend_from_slice(&[0x11; 32]); // random
        b.push(32);
        b.extend_from_slice(&[0x22; 32]); // legacy_session_id
        b.extend_from_slice(&vec16(&[0x13, 0x01, 0x13, 0x02])); // TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384
        b.extend_from_slice(&[1, 0]); // compression: null
        b.extend_from_slice(&vec16(&self.extensions()));
        b
    }

    fn extensions(&self) -> Vec<u8> {
        let mut e = Vec::new();
        if let Some(names) = &self.names {
            let mut list = Vec::new();
            for name in names {
                list.push(0); // host_name
                list.extend_from_slice(&vec16(name));
            }
            e.extend_from_slice(&extension(0x0000, &vec16(&list)));
        }
        e.extend_from_slice(&extension(0x000a, &vec16(&[0x00, 0x1d]))); // supported_groups: x25519
        e.extend_from_slice(&extension(0x000d, &vec16(&[0x04, 0x03, 0x08, 0x04]))); // signature_algorithms
        e.extend_from_slice(&extension(0x002b, &[2, 3, 4])); // supported_versions: TLS 1.3
        let mut share = vec![0x00, 0x1d];
        share.extend_from_slice(&vec16(&[0x33; 32]));
        e.extend_from_slice(&extension(0x0033, &vec16(&share))); // key_share
        if self.ech {
            // ECHClientHello, outer: type 0, HPKE suite (HKDF-SHA256, AES-128-GCM), config id, enc, payload.
            let mut ech = vec![0, 0x00, 0x01, 0x00, 0x01, 7];
            ech.extend_from_slice(&vec16(&[0x44; 32]));
            ech.extend_from_slice(&vec16(&[0x55; 128]));
            e.extend_from_slice(&extension(0xfe0d, &ech));
        }
        e
    }
}

fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = kind.to_be_bytes().to_vec();
    out.extend_from_slice(&vec16(data));
    out
}

fn vec16(data: &[u8]) -> Vec<u8> {
    let mut out = u16b(data.len()).to_vec();
    out.extend_from_slice(data);
    out
}

fn u16b(n: usize) -> [u8; 2] {
    u16::try_from(n).expect("fits in u16").to_be_bytes()
}

fn u24(n: usize) -> [u8; 3] {
    let b = u32::try_from(n).expect("fits").to_be_bytes();
    [b[1], b[2], b[3]]
}
