package tierconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Hash is the hex sha256 of the JSON of c. Struct fields marshal in a fixed
// order and sizes and durations in canonical form, so equal configs hash
// equal across processes and restarts whatever spelling they came in.
// Hash does not fill defaults: hash c.WithDefaults() (as Compile does) to
// make an unset field and its default hash the same.
func (c Config) Hash() string {
	b, err := json.Marshal(c)
	if err != nil {
		// Only a NaN or infinite heuristicFraction gets here (json
		// refuses them); Validate refuses it too, so any stable stand-in
		// will do.
		c.Defaults.HeuristicFraction = -1
		b, _ = json.Marshal(c)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
