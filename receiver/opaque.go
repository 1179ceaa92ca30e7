package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strings"
)

// sign returns base64url(payload) + "." + base64url(HMAC(payload, scope)).
func (r *Receiver) sign(payload []byte, scope string) string {
	m := hmac.New(sha256.New, r.stateKey)
	m.Write(payload)
	m.Write([]byte{0})
	m.Write([]byte(scope))
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// verify checks a value made by sign and returns its payload.
func (r *Receiver) verify(s, scope string) ([]byte, bool) {
	p, mac, found := strings.Cut(s, ".")
	if !found {
		return nil, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return nil, false
	}
	if !hmac.Equal([]byte(r.sign(payload, scope)[len(p)+1:]), []byte(mac)) {
		return nil, false
	}
	return payload, true
}

// encodeCursor makes an opaque tasks/list cursor, valid only for the tenant.
func (r *Receiver) encodeCursor(seq uint64, id Identity) string {
	b := binary.BigEndian.AppendUint64(nil, seq)
	return r.sign(b, "cursor:"+id.Tenant)
}

func (r *Receiver) decodeCursor(c string, id Identity) (uint64, bool) {
	b, ok := r.verify(c, "cursor:"+id.Tenant)
	if !ok || len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// requestState is the MRTR state echoed by the client between rounds.
type requestState struct {
	Tool string   `json:"tool"`
	Keys []string `json:"keys"`
	// Answers are the answers of earlier rounds, so a multi-round call needs
	// only the newest answers on each retry. Signed, never trusted unsigned.
	Answers map[string]json.RawMessage `json:"answers,omitempty"`
}

func (r *Receiver) encodeState(st requestState, id Identity) string {
	b, _ := json.Marshal(st)
	return r.sign(b, "state:"+id.Tenant)
}

func (r *Receiver) decodeState(s string, id Identity) (requestState, bool) {
	var st requestState
	b, ok := r.verify(s, "state:"+id.Tenant)
	if !ok || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}
