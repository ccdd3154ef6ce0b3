package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxJSONDepth bounds how deeply a request body may nest objects and arrays; the API's
// requests nest two levels.
const MaxJSONDepth = 16

// DecodeStrict decodes a request body into v (a pointer to one of the request types) more
// strictly than encoding/json does, because muxd's requests come from programs that may be
// hostile and a lenient reading lets two parsers disagree about one body:
//
//   - the body is valid UTF-8 and holds no lone UTF-16 surrogate escape (\ud800);
//   - object keys match a field's JSON name exactly (encoding/json would take "ID" or
//     "CLASS" for "id" and "class"), and no field is unknown;
//   - no object repeats a key (encoding/json keeps the last one silently);
//   - there is exactly one JSON value, nested at most MaxJSONDepth deep.
//
// Every failure wraps ErrInvalid and says what is wrong and where. DecodeStrict changes v
// only when the whole body is acceptable.
func DecodeStrict(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("DecodeStrict needs a non-nil pointer, got %T", v)
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: request body is not valid UTF-8 (first bad byte at offset %d)", ErrInvalid, firstInvalidUTF8(data))
	}
	if err := checkSurrogates(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkValue(dec, rv.Type().Elem(), "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: malformed JSON body: data after the object", ErrInvalid)
	}
	// The shape is right; now let encoding/json convert the values (types, ranges).
	tmp := reflect.New(rv.Type().Elem())
	full := json.NewDecoder(bytes.NewReader(data))
	full.DisallowUnknownFields()
	if err := full.Decode(tmp.Interface()); err != nil {
		return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalid, cleanJSONError(err))
	}
	rv.Elem().Set(tmp.Elem())
	return nil
}

// cleanJSONError drops encoding/json's "json: " prefix.
func cleanJSONError(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// checkSurrogates refuses \uD800-\uDFFF escapes that do not form a pair: encoding/json
// would silently turn them into U+FFFD. A backslash can only appear inside a JSON string
// (anywhere else the body is malformed and the decoder says so), so a scan that steps
// over each escape as a whole is exact.
func checkSurrogates(data []byte) error {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range data[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a two-character escape (\n, \\, \"...), or malformed: the decoder reports it
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return fmt.Errorf("%w: request body has an unpaired UTF-16 surrogate \\u%04x at offset %d (not valid Unicode)", ErrInvalid, r, i)
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("%w: request body has an unpaired UTF-16 surrogate \\u%04x at offset %d (not valid Unicode)", ErrInvalid, r, i)
		}
		i += 5
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// opaque reports whether a type decodes itself (time.Time...): its inside is not walked.
func opaque(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// jsonFields maps the exact JSON names of a struct's fields (embedded structs flattened,
// as encoding/json does) to their types.
func jsonFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			jsonFields(ft, into)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := into[name]; !dup {
			into[name] = f.Type
		}
	}
}

func where(path string) string {
	if path == "" {
		return "the request body"
	}
	return path
}

// walkValue reads one JSON value from dec, checking the keys of every object against t
// (nil: a value whose shape is not checked).
func walkValue(dec *json.Decoder, t reflect.Type, path string, depth int) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || opaque(t)) {
		t = nil
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: malformed JSON body: unexpected end of the body", ErrInvalid)
		}
		return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalid, cleanJSONError(err))
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: encoding/json checks its type later
	}
	if depth >= MaxJSONDepth {
		return fmt.Errorf("%w: %s nests objects or arrays more than %d deep", ErrInvalid, where(path), MaxJSONDepth)
	}
	switch delim {
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = map[string]reflect.Type{}
			jsonFields(t, fields)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalid, cleanJSONError(err))
			}
			key, _ := kt.(string)
			if seen[key] {
				return fmt.Errorf("%w: key %q appears twice in %s", ErrInvalid, key, where(path))
			}
			seen[key] = true
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			var next reflect.Type
			switch {
			case fields != nil:
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return fmt.Errorf("%w: key %q in %s must be written %q (keys are case-sensitive)", ErrInvalid, key, where(path), name)
						}
					}
					return fmt.Errorf("%w: unknown field %q in %s", ErrInvalid, key, where(path))
				}
				next = ft
			case t != nil && t.Kind() == reflect.Map:
				next = t.Elem()
			}
			if err := walkValue(dec, next, sub, depth+1); err != nil {
				return err
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalid, cleanJSONError(err))
	}
	return nil
}

// ValidateName checks a free-form name (namespace, pod) that muxd stores, logs and
// reports: valid UTF-8, printable (no control or format characters such as a newline, NUL
// or a bidi override), no U+FFFD (what invalid input decodes to), at most max bytes.
// field names it in the error.
func ValidateName(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes long, more than %d", ErrInvalid, field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8 (first bad byte at offset %d)", ErrInvalid, field, firstInvalidUTF8([]byte(s)))
	}
	for i, r := range s {
		if r == utf8.RuneError {
			return fmt.Errorf("%w: %s holds U+FFFD at offset %d (a replacement for invalid text)", ErrInvalid, field, i)
		}
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s holds the non-printable character %U at offset %d", ErrInvalid, field, r, i)
		}
	}
	return nil
}
