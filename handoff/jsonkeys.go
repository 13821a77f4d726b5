package handoff

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Strict JSON objects: the keys a frame (and each object in it) may carry
// are its struct's json names, compared exactly, each at most once
// (encoding/json alone would match them case-insensitively and let the
// last of two keys win). checkKeys, in wire.go, applies them to a frame.

// jsonKeys returns the json names of t's fields, those of embedded structs
// included (encoding/json flattens them).
func jsonKeys(t reflect.Type) map[string]bool {
	keys := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			for k := range jsonKeys(f.Type) {
				keys[k] = true
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys[name] = true
	}
	return keys
}

// objectKeys reads an object from d, calling value to read each key's value.
func objectKeys(d *json.Decoder, keys map[string]bool, value func(key string) error) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t != json.Delim('{') {
		return keyError(fmt.Sprintf("%v where an object belongs", t))
	}
	seen := make(map[string]bool, len(keys))
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		switch {
		case !keys[key]:
			return keyError(fmt.Sprintf("unknown key %q", key))
		case seen[key]:
			return keyError(fmt.Sprintf("duplicate key %q", key))
		}
		seen[key] = true
		if err := value(key); err != nil {
			return err
		}
	}
	_, err = d.Token()
	return err
}

// eachElement reads an array (or null) from d, calling elem to read each
// element.
func eachElement(d *json.Decoder, elem func() error) error {
	t, err := d.Token()
	if err != nil || t == nil {
		return err
	}
	if t != json.Delim('[') {
		return keyError(fmt.Sprintf("%v where a list belongs", t))
	}
	for d.More() {
		if err := elem(); err != nil {
			return err
		}
	}
	_, err = d.Token()
	return err
}

// skipValue reads one value, however nested, from d.
func skipValue(d *json.Decoder) error {
	for depth := 0; ; {
		t, err := d.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// keyError is a payload of valid JSON with a key, or a shape, that no frame has.
type keyError string

func (e keyError) Error() string { return string(e) }
