package tools

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ReadForPreview reads a workspace file for a prompt's preview (the write_file diff, SPEC §3):
// the content (at most max bytes; longer files are an error), and whether the file exists. A
// path outside the workspace is an error wrapping ErrOutsideWorkspace; nothing is read then.
func ReadForPreview(workspace, p string, max int64) (content string, exists bool, err error) {
	j, err := openJail(workspace, nil)
	if err != nil {
		return "", false, err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return "", false, err
	}
	// Only regular files are opened (a named pipe would block the open; see openRegular).
	fi, err := j.root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	case fi.IsDir():
		return "", true, fmt.Errorf("%s is a folder", display(rel))
	case !fi.Mode().IsRegular():
		return "", true, notRegular(rel, fi.Mode())
	case fi.Size() > max:
		return "", true, fmt.Errorf("%s is too large to preview (%d bytes)", display(rel), fi.Size())
	}
	f, fi, err := j.openRegular(rel, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", true, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	defer f.Close()
	if fi.Size() > max {
		return "", true, fmt.Errorf("%s is too large to preview (%d bytes)", display(rel), fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", true, err
	}
	return string(b), true, nil
}

// WriteFileDetails is write_file's details (UI-only, never sent to the model): what the file held
// before the write, so the transcript can show the diff after the fact.
type WriteFileDetails struct {
	PreviousExists   bool   `json:"previousExists"`
	PreviousContent  string `json:"previousContent,omitempty"`
	PreviousTooLarge bool   `json:"previousTooLarge,omitempty"`
}

// maxPreviousContent bounds what write_file keeps of a file's previous content in details.
const maxPreviousContent = 256 << 10
