package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"countersign/internal/tool"
)

// DefaultReadLimit is how many lines read_file returns when the call gives no limit.
const DefaultReadLimit = 2000

// MaxListEntries caps list_files' entries; beyond it the listing is marked truncated.
const MaxListEntries = 1000

// ReadFileOutput is read_file's structuredContent (SPEC §10): path (slash-separated, relative to the
// workspace), content (the lines read, newlines kept), totalLines in the file, offset (1-based
// first line returned), lines returned, and truncated when content stops before the end of the
// file or a line was cut at the output cap.
type ReadFileOutput struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	TotalLines int    `json:"totalLines"`
	Offset     int    `json:"offset"`
	Lines      int    `json:"lines"`
	Truncated  bool   `json:"truncated"`
}

const readFileInput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace or absolute inside it."},
    "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
    "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default 2000)."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

const readFileOutput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "content": {"type": "string"},
    "totalLines": {"type": "integer", "minimum": 0},
    "offset": {"type": "integer", "minimum": 1},
    "lines": {"type": "integer", "minimum": 0},
    "truncated": {"type": "boolean"}
  },
  "required": ["path", "content", "totalLines", "offset", "lines", "truncated"],
  "additionalProperties": false
}`

func readFileTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "read_file",
		Title: "Read file",
		Description: "Read a text file of the workspace. Returns up to `limit` lines (default 2000) " +
			"from the 1-based line `offset`, and the file's total line count; use offset to page " +
			"through long files. Paths outside the workspace are refused.",
		InputSchema:  json.RawMessage(readFileInput),
		OutputSchema: json.RawMessage(readFileOutput),
		InputCheck:   checkPath("path", "", true, cfg.Protected),
		Annotations:  readOnly(),
		Execute: func(ctx context.Context, arguments json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Path   string `json:"path"`
				Offset int    `json:"offset"`
				Limit  int    `json:"limit"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return readFile(tc.Workspace(), in.Path, in.Offset, in.Limit, cfg.OutputCap, cfg.Protected)
		},
	}
}

// readFile implements read_file: lines [offset, offset+limit) of the file, at most budget bytes.
func readFile(workspace, p string, offset, limit, budget int, protected Protected) (tool.Result, error) {
	if offset <= 0 {
		offset = 1
	}
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	j, err := openJail(workspace, protected)
	if err != nil {
		return tool.Result{}, err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return tool.Result{}, err
	}
	// Only regular files are opened (a named pipe would block the open; see openRegular).
	switch fi, err := j.root.Stat(rel); {
	case err != nil:
		return tool.Result{}, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	case fi.IsDir():
		return tool.Result{}, fmt.Errorf("%s is a folder, not a file; use list_files", display(rel))
	case !fi.Mode().IsRegular():
		return tool.Result{}, fmt.Errorf("%w; read_file reads regular files only", notRegular(rel, fi.Mode()))
	}
	f, fi, err := j.openRegular(rel, os.O_RDONLY, 0)
	if err != nil {
		return tool.Result{}, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		return tool.Result{}, fmt.Errorf("%s is a binary file (%d bytes); read_file reads text", display(rel), fi.Size())
	}

	var (
		content   []byte
		line      int  // number of the line being read, 1-based
		inLine    bool // whether a line has started and not yet ended
		returned  int
		cut       bool
		last      = offset + limit - 1
		exhausted bool // budget spent: no further line is returned
	)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if !inLine {
				line++
				inLine = true
				if line >= offset && line <= last && !exhausted {
					if len(content) >= budget {
						exhausted = true
					} else {
						returned++
					}
				}
			}
			if line >= offset && line <= last && !exhausted {
				room := budget - len(content)
				if len(chunk) > room {
					content = append(content, chunk[:runeStart(chunk, room)]...)
					cut, exhausted = true, true
				} else {
					content = append(content, chunk...)
				}
			}
			if chunk[len(chunk)-1] == '\n' {
				inLine = false
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return tool.Result{}, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
		}
	}
	if offset > 1 && offset > line {
		return tool.Result{}, fmt.Errorf("offset %d is past the end of %s (%d lines)", offset, display(rel), line)
	}
	out := ReadFileOutput{
		Path:       display(rel),
		Content:    string(content),
		TotalLines: line,
		Offset:     offset,
		Lines:      returned,
		Truncated:  cut || offset+returned-1 < line,
	}
	text := out.Content
	switch {
	case line == 0:
		text = "(empty file)"
	case out.Truncated:
		end := offset + returned - 1
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		if cut {
			// Resume at the cut line, unless it alone is over the cap.
			next := end
			if returned == 1 {
				next = end + 1
			}
			text += fmt.Sprintf("[Output cap of %d bytes reached: line %d of %d is cut. Use offset=%d to continue.]", budget, end, line, next)
		} else {
			text += fmt.Sprintf("[Showing lines %d-%d of %d. Use offset=%d to continue.]", offset, end, line, end+1)
		}
	}
	return success(text, out), nil
}

// readRegular reads the regular file rel (see jail.openRegular), at most max bytes; a longer
// file is an error.
func readRegular(j *jail, rel string, max int64) ([]byte, error) {
	f, _, err := j.openRegular(rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", display(rel), max)
	}
	return b, err
}

// runeStart returns the largest n <= max such that b[:n] does not end inside a UTF-8 sequence.
func runeStart(b []byte, max int) int {
	if max >= len(b) {
		return len(b)
	}
	if max <= 0 {
		return 0
	}
	n := max
	for n > 0 && n > max-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return n
}

// unwrapPath drops the *fs.PathError wrapper, whose path is the internal resolved one.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// FileEntry is one entry of list_files: path (slash-separated, relative to the workspace), size
// in bytes (0 for folders) and whether it is a folder.
type FileEntry struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Dir  bool   `json:"dir"`
}

// ListFilesOutput is list_files' structuredContent (SPEC §10): the listed path, its entries in lexical walk
// order, and truncated when the walk stopped at MaxListEntries.
type ListFilesOutput struct {
	Path      string      `json:"path"`
	Files     []FileEntry `json:"files"`
	Truncated bool        `json:"truncated"`
}

const listFilesInput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "Folder to list, relative to the workspace (default \".\")."},
    "pattern": {"type": "string", "minLength": 1, "description": "Glob matched against each entry's base name (Go path.Match syntax, e.g. \"*.go\")."}
  },
  "additionalProperties": false
}`

const listFilesOutput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "files": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "size": {"type": "integer", "minimum": 0},
          "dir": {"type": "boolean"}
        },
        "required": ["path", "size", "dir"],
        "additionalProperties": false
      }
    },
    "truncated": {"type": "boolean"}
  },
  "required": ["path", "files", "truncated"],
  "additionalProperties": false
}`

func listFilesTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "list_files",
		Title: "List files",
		Description: "List the files and folders under a workspace folder, recursively, skipping .git. " +
			"An optional glob pattern filters entries by base name. Stops after 1000 entries.",
		InputSchema:  json.RawMessage(listFilesInput),
		OutputSchema: json.RawMessage(listFilesOutput),
		InputCheck:   checkPath("path", ".", false, cfg.Protected),
		Annotations:  readOnly(),
		Execute: func(ctx context.Context, arguments json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Path    string `json:"path"`
				Pattern string `json:"pattern"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return listFiles(ctx, tc.Workspace(), in.Path, in.Pattern)
		},
	}
}

// listFiles implements list_files.
func listFiles(ctx context.Context, workspace, p, pattern string) (tool.Result, error) {
	if p == "" {
		p = "."
	}
	if pattern != "" {
		if _, err := path.Match(pattern, ""); err != nil {
			return tool.Result{}, fmt.Errorf("pattern %q: %w", pattern, err)
		}
	}
	j, err := openJail(workspace, nil)
	if err != nil {
		return tool.Result{}, err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return tool.Result{}, err
	}
	start := display(rel)
	out := ListFilesOutput{Path: start, Files: []FileEntry{}}
	errFull := errors.New("full")
	// walkFS keeps the walk inside the workspace and opens nothing but folders; WalkDir reports
	// symlinks without following them.
	err = fs.WalkDir(walkFS{j.root}, start, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == start {
				return err
			}
			return nil // an unreadable folder below the start is skipped
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if name == start && d.IsDir() {
			return nil // a listed folder is not its own entry; a listed file is
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		if pattern != "" {
			if ok, _ := path.Match(pattern, d.Name()); !ok {
				return nil
			}
		}
		if len(out.Files) == MaxListEntries {
			out.Truncated = true
			return errFull
		}
		e := FileEntry{Path: name, Dir: d.IsDir()}
		if !e.Dir {
			if fi, err := d.Info(); err == nil {
				e.Size = fi.Size()
			}
		}
		out.Files = append(out.Files, e)
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return tool.Result{}, fmt.Errorf("cannot list %s: %w", start, unwrapPath(err))
	}
	var b strings.Builder
	for _, f := range out.Files {
		b.WriteString(f.Path)
		if f.Dir {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	switch {
	case len(out.Files) == 0:
		b.WriteString("(no entries)")
	case out.Truncated:
		fmt.Fprintf(&b, "[Stopped after %d entries; list a subfolder or use a pattern.]", MaxListEntries)
	}
	return success(strings.TrimSuffix(b.String(), "\n"), out), nil
}

// WriteFileOutput is write_file's structuredContent (SPEC §10): path (slash-separated, relative to the
// workspace), bytes written, and created when the file did not exist before.
type WriteFileOutput struct {
	Path    string `json:"path"`
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"`
}

const writeFileInput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace or absolute inside it."},
    "content": {"type": "string", "description": "The whole new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`

const writeFileOutput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "bytes": {"type": "integer", "minimum": 0},
    "created": {"type": "boolean"}
  },
  "required": ["path", "bytes", "created"],
  "additionalProperties": false
}`

func writeFileTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "write_file",
		Title: "Write file",
		Description: "Create or replace a file of the workspace with the given content, creating " +
			"missing parent folders. Paths outside the workspace are refused.",
		InputSchema:  json.RawMessage(writeFileInput),
		OutputSchema: json.RawMessage(writeFileOutput),
		InputCheck:   checkPath("path", "", true, cfg.Protected),
		WritesFiles:  true, // accept-edits mode (SPEC §14): the path is checked inside the workspace
		Annotations:  tool.Annotations{DestructiveHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)},
		Preview:      writeFilePreview,
		Execute: func(ctx context.Context, arguments json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Path    string `json:"path"`
				Content string `json:"content"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			// A person's approval binds what they saw (SPEC §14; issue 28): the file must still
			// be what their prompt's diff was drawn against. An edit that names another path was
			// shown a diff computed when it was typed, which is not stored: it is not checked.
			var base *tool.Preview
			if c := tc.Consent(); c.ByPerson && c.Preview != nil && c.Preview.Path == in.Path {
				base = c.Preview
			}
			return writeFile(ctx, tc.Workspace(), in.Path, in.Content, cfg.Protected, base)
		},
	}
}

// writeFile implements write_file. base, when not nil, is the preview a person approved the call
// on: the file must still be what it showed (unchangedSincePreview), else nothing is written and
// the error wraps ErrChangedSincePrompt.
func writeFile(ctx context.Context, workspace, p, content string, protected Protected, base *tool.Preview) (tool.Result, error) {
	j, err := openJail(workspace, protected)
	if err != nil {
		return tool.Result{}, err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return tool.Result{}, err
	}
	if rel == "." {
		return tool.Result{}, fmt.Errorf("path %q is the workspace folder itself", p)
	}
	if base != nil {
		if err := unchangedSincePreview(ctx, j, rel, base); err != nil {
			return tool.Result{}, err
		}
	}
	created := false
	var details WriteFileDetails
	switch fi, err := j.root.Stat(rel); {
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return tool.Result{}, fmt.Errorf("cannot write %s: %w", display(rel), unwrapPath(err))
	case fi.IsDir():
		return tool.Result{}, fmt.Errorf("cannot write %s: it is a folder", display(rel))
	case !fi.Mode().IsRegular():
		// Writing to a named pipe blocks until a reader comes; to a device, writes to it.
		return tool.Result{}, fmt.Errorf("%w; write_file writes regular files only", notRegular(rel, fi.Mode()))
	case fi.Size() > maxPreviousContent:
		details = WriteFileDetails{PreviousExists: true, PreviousTooLarge: true}
	default:
		// Kept for the UI's diff after the fact; a read failure only loses the diff.
		if prev, err := readRegular(j, rel, maxPreviousContent); err == nil {
			details = WriteFileDetails{PreviousExists: true, PreviousContent: string(prev)}
		}
	}
	if dir := path.Dir(display(rel)); dir != "." {
		if err := j.root.MkdirAll(dir, 0o755); err != nil {
			return tool.Result{}, fmt.Errorf("cannot create the folder %s: %w", dir, unwrapPath(err))
		}
	}
	f, _, err := j.openRegular(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return tool.Result{}, fmt.Errorf("cannot write %s: %w", display(rel), unwrapPath(err))
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("cannot write %s: %w", display(rel), unwrapPath(err))
	}
	out := WriteFileOutput{Path: display(rel), Bytes: len(content), Created: created}
	verb := "Wrote"
	if created {
		verb = "Created"
	}
	res := success(fmt.Sprintf("%s %s (%d bytes)", verb, out.Path, out.Bytes), out)
	res.Details = tool.Structured(details)
	return res, nil
}
