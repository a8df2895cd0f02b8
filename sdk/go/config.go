package policy

import (
	"sort"
	"strconv"
	"strings"
)

// Config is the `init` configuration: key/value strings (the last value of a repeated key wins),
// with getters whose errors name the key.
type Config struct {
	values map[string]string
	keys   []string
}

// NewConfig makes a Config from key/value pairs, as the host passes them.
func NewConfig(pairs [][2]string) *Config {
	c := &Config{values: make(map[string]string, len(pairs))}
	for _, kv := range pairs {
		if _, seen := c.values[kv[0]]; !seen {
			c.keys = append(c.keys, kv[0])
		}
		c.values[kv[0]] = kv[1]
	}
	return c
}

// ExpectOnly refuses keys the policy does not know, so a typo is never silently ignored.
func (c *Config) ExpectOnly(known ...string) error {
	var unknown []string
	for _, k := range c.keys {
		found := false
		for _, want := range known {
			found = found || k == want
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	names := "none"
	if len(known) > 0 {
		names = strings.Join(known, ", ")
	}
	return Refusal("unknown config key(s) " + strings.Join(unknown, ", ") + "; known: " + names)
}

// Get is the raw value of key and whether it was given.
func (c *Config) Get(key string) (string, bool) {
	v, ok := c.values[key]
	return v, ok
}

// Uint is key as decimal digits (nothing else: no sign, no spaces) in low..=high, or fallback
// when absent.
func (c *Config) Uint(key string, fallback, low, high uint64) (uint64, error) {
	raw, ok := c.values[key]
	if !ok {
		return fallback, nil
	}
	digits := raw != "" && len(raw) <= 19
	for i := 0; i < len(raw) && digits; i++ {
		digits = raw[i] >= '0' && raw[i] <= '9'
	}
	if !digits {
		return 0, Refusal("config key " + key + ": " + strconv.Quote(raw) + " is not a whole number")
	}
	v, _ := strconv.ParseUint(raw, 10, 64)
	if v < low || v > high {
		return 0, Refusal("config key " + key + ": " + raw + " is outside " +
			strconv.FormatUint(low, 10) + "..=" + strconv.FormatUint(high, 10))
	}
	return v, nil
}

// Float is key as a number in [low, high], or fallback when absent.
func (c *Config) Float(key string, fallback, low, high float64) (float64, error) {
	raw, ok := c.values[key]
	if !ok {
		return fallback, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	if err != nil || v != v {
		return 0, Refusal("config key " + key + ": " + strconv.Quote(raw) + " is not a number")
	}
	if v < low || v > high {
		return 0, Refusal("config key " + key + ": " + raw + " is outside [" +
			strconv.FormatFloat(low, 'g', -1, 64) + ", " + strconv.FormatFloat(high, 'g', -1, 64) + "]")
	}
	return v, nil
}

// Refusal is an error whose message is what the host reports from `init` or `restore`.
type Refusal string

func (r Refusal) Error() string { return string(r) }
