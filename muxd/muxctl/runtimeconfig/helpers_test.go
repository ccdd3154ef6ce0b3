package runtimeconfig

import (
	"bytes"
	"encoding/json"
)

func jsonIndent(dst *bytes.Buffer, s string) error {
	if err := json.Indent(dst, []byte(s), "", "  "); err != nil {
		return err
	}
	dst.WriteByte('\n')
	return nil
}
