// Package seclink authenticates and encrypts ftrma's control connections
// (ftrun to its agents, ranks to the rendezvous) with mutual TLS 1.3 keyed by
// a shared secret, so that users manage no certificates and an on-path relay
// can neither read nor change a frame.
//
// How a key becomes a link:
//
//   - A secret (the job's, or the running agents' from GenSecret) is split
//     into keys by DeriveKey, one per purpose and peer: HKDF-SHA256 with the
//     label as info. A host given DeriveKey(secret, "agent h2") learns
//     nothing of secret or of other hosts' keys.
//   - From a key, each role (client, server) gets its own Ed25519 key pair:
//     the seed is HKDF-SHA256(key, salt "ftrma/seclink/v1 identity", info
//     "client" or "server"). Each presents a self-signed certificate made on
//     the fly for its key pair.
//   - Each side accepts the other only if the peer's one certificate carries
//     exactly the public key the key gives the other role. TLS 1.3 then
//     proves the peer holds the matching private key (CertificateVerify
//     over the transcript). Names, issuers and expiry are ignored: the pin is
//     the whole trust decision.
//   - Only TLS 1.3 is offered, whose suites are all AEAD; session tickets are
//     off and Go has no 0-RTT, so no application byte moves before both
//     sides are authenticated.
//
// The caller's duties:
//
//  1. Make the secret once with GenSecret (ftrun agent --gen-secret) and read
//     it back with ParseSecret, which refuses passphrases and short or
//     patterned secrets.
//  2. Derive a key per purpose with DeriveKey; give both ends the same label.
//  3. Dial or accept a net.Conn, then call Client (the dialling side) or
//     Server (the accepting side) with the key and a deadline. Use only the
//     returned *tls.Conn afterwards; on error, close the raw conn.
//  4. A server that accepts connections from anywhere bounds the handshakes
//     under way with one Gate: Admit before Server and its release after
//     it (or Gate.Serve, which does both); a full gate cuts off its oldest
//     handshake. Refusals rate-limits the log lines of refused connections.
//
// The canonical accept loop:
//
//	gate := seclink.NewGate(64)
//	for {
//		c, err := ln.Accept()
//		if err != nil {
//			return err
//		}
//		go func() {
//			tc, err := gate.Serve(c, key, 10*time.Second)
//			if err != nil {
//				log.Printf("refused %s: %v", c.RemoteAddr(), err)
//				return // Serve closed c
//			}
//			defer tc.Close()
//			serve(tc)
//		}()
//	}
//
// Errors:
//
//   - ErrUnknownKey: the peer does not hold the key (its certificate is not
//     the one the key gives its role, or it refused ours). Returned by Client,
//     Server and Gate.Serve.
//   - ErrBadSecret: ParseSecret refused a secret; the message says why and
//     points to ftrun agent --gen-secret.
//   - Other handshake failures (deadline, broken connection, a peer that does
//     not speak TLS 1.3) come back wrapped as "TLS handshake: ...".
//
// Identities are cached per key (about 0.3 ms of key derivation and
// certificate signing saved per connection); the cache is emptied when it
// passes 256 keys.
package seclink
