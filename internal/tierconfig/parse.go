package tierconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Parse decodes a YAML or JSON config strictly, fills defaults for unset
// fields (WithDefaults) and validates. Empty input (or a document with only
// comments) is Default(). Every problem is reported at once, each naming
// its field path: unknown or misspelt fields, values of the wrong type,
// malformed sizes and durations, then validation failures.
func Parse(data []byte) (Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Default(), nil
	}
	// Strict: duplicate keys are errors too.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Config{}, fmt.Errorf("config is not valid YAML or JSON: %w", err)
	}
	if string(js) == "null" {
		return Default(), nil
	}
	if err := checkShape(js); err != nil {
		return Config{}, err
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// checkShape should have caught everything decoding can refuse.
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Load reads and Parses a file; errors name the file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}
