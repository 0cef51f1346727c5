package rules

import (
	"encoding/binary"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// What shells may read differently (SPEC §14 "One parse, one program"): such text never
// matches an allow rule.

// unreadableText says why shells may read the text differently, or "" when nothing in it is
// known to: a carriage return (dash keeps it in the word, mvdan.cc/sh and some bash readings
// end the word there; a backslash before CR-LF continues the line in neither), a NUL (C
// strings end there), any other C0 control but tab and newline, DEL, or a C1 control
// (U+0080–U+009F: NEL is a line break to some readers). The reason names the character and
// its byte offset: "the command holds U+000D (a carriage return) at byte 9, which shells read
// differently".
func unreadableText(s string) string {
	for i, r := range s {
		name := ""
		switch {
		case r == '\t' || r == '\n':
			continue
		case r == '\r':
			name = " (a carriage return)"
		case r == 0:
			name = " (NUL)"
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
		default:
			continue
		}
		return fmt.Sprintf("the command holds %U%s at byte %d, which shells read differently", r, name, i+1)
	}
	return ""
}

// sameTree reports whether two parses of one text (POSIX and bash) are the same tree: the same
// nodes, in the same places, with the same operators and literal values. It compares
// treeSigs.
func sameTree(a, b *syntax.File) bool {
	sa, sb := sigPool.Get().(*[]byte), sigPool.Get().(*[]byte)
	defer sigPool.Put(sa)
	defer sigPool.Put(sb)
	*sa = appendTreeSig((*sa)[:0], a)
	*sb = appendTreeSig((*sb)[:0], b)
	return slices.Equal(*sa, *sb)
}

var sigPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendTreeSig appends a serialisation of the tree to buf: for each node in walk order, a tag
// for its type, its start and end offsets, and the fields that are not nodes (operators,
// flags, literal text); a zero byte ends a node's children.
func appendTreeSig(buf []byte, f *syntax.File) []byte {
	flag := func(bs ...bool) {
		var x byte
		for i, b := range bs {
			if b {
				x |= 1 << i
			}
		}
		buf = append(buf, x)
	}
	str := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			buf = append(buf, 0)
			return true
		}
		buf = append(buf, nodeTag(n))
		if buf[len(buf)-1] == tagOther {
			str(fmt.Sprintf("%T", n))
		}
		buf = binary.AppendUvarint(buf, uint64(n.Pos().Offset()))
		buf = binary.AppendUvarint(buf, uint64(n.End().Offset()))
		switch n := n.(type) {
		case *syntax.Stmt:
			flag(n.Negated, n.Background, n.Coprocess, n.Disown)
		case *syntax.Redirect:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.BinaryCmd:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.Lit:
			str(n.Value)
		case *syntax.SglQuoted:
			flag(n.Dollar)
			str(n.Value)
		case *syntax.DblQuoted:
			flag(n.Dollar)
		case *syntax.Comment:
			str(n.Text)
		case *syntax.ParamExp:
			flag(n.Short, n.Excl, n.Length, n.Width, n.IsSet)
			buf = binary.AppendUvarint(buf, uint64(n.Names))
			if n.Exp != nil {
				buf = binary.AppendUvarint(buf, uint64(n.Exp.Op))
			}
			if n.Repl != nil {
				flag(n.Repl.All)
			}
			flag(n.Slice != nil, n.Index != nil, n.NestedParam != nil)
		case *syntax.CmdSubst:
			flag(n.Backquotes, n.TempFile, n.ReplyVar)
		case *syntax.ArithmExp:
			flag(n.Bracket, n.Unsigned)
		case *syntax.ArithmCmd:
			flag(n.Unsigned)
		case *syntax.BinaryArithm:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.UnaryArithm:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
			flag(n.Post)
		case *syntax.ProcSubst:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.CaseItem:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.CaseClause:
			flag(n.Braces)
		case *syntax.WhileClause:
			flag(n.Until)
		case *syntax.ForClause:
			flag(n.Select, n.Braces)
		case *syntax.FuncDecl:
			flag(n.RsrvWord, n.Parens)
		case *syntax.Assign:
			flag(n.Append, n.Naked)
		case *syntax.BinaryTest:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.UnaryTest:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.ExtGlob:
			buf = binary.AppendUvarint(buf, uint64(n.Op))
		case *syntax.BraceExp:
			flag(n.Sequence)
		case *syntax.TimeClause:
			flag(n.PosixFormat)
		case *syntax.DeclClause:
			if n.Variant != nil {
				str(n.Variant.Value)
			}
		}
		return true
	})
	return buf
}

// codeReaders are the programs that read a program text from their standard input when it is
// not a terminal and no script is named: shells and interpreters (path.Match patterns on the
// base name). With a redirection or a pipe into them, no rule matches (simpleCmd.stdin); their
// "Always allow…" suggestion is the exact command.
var codeReaders = []string{
	"python", "python[0-9]*", "pypy", "pypy[0-9]*", "node", "nodejs", "deno", "bun", "perl", "perl[0-9]*",
	"ruby", "ruby[0-9]*", "irb", "php", "php[0-9]*", "lua", "lua[0-9]*", "luajit", "R", "Rscript", "julia",
	"tclsh", "tclsh[0-9]*", "wish", "expect", "pwsh", "powershell", "osascript", "ghci", "runghc", "erl",
	"escript", "elixir", "iex", "scala", "groovy", "jshell", "swift", "dotnet-script", "dc", "gdb",
	"sqlite3", "psql", "mysql",
}

// readsCode reports whether a program (its base name) is a shell or an interpreter
// (codeReaders).
func readsCode(prog string) bool {
	prog = filepath.Base(prog)
	if shells[prog] || prog == "eval" || prog == "source" || prog == "." {
		return true
	}
	for _, p := range codeReaders {
		if ok, _ := path.Match(p, prog); ok {
			return true
		}
	}
	return false
}

// tagOther is nodeTag's tag for a node type it does not list: its type name follows.
const tagOther = 255

// nodeTag is a byte per node type, for appendTreeSig.
func nodeTag(n syntax.Node) byte {
	switch n.(type) {
	case *syntax.File:
		return 1
	case *syntax.Stmt:
		return 2
	case *syntax.CallExpr:
		return 3
	case *syntax.Word:
		return 4
	case *syntax.Lit:
		return 5
	case *syntax.SglQuoted:
		return 6
	case *syntax.DblQuoted:
		return 7
	case *syntax.ParamExp:
		return 8
	case *syntax.CmdSubst:
		return 9
	case *syntax.Redirect:
		return 10
	case *syntax.BinaryCmd:
		return 11
	case *syntax.Comment:
		return 12
	case *syntax.Assign:
		return 13
	case *syntax.Subshell:
		return 14
	case *syntax.Block:
		return 15
	case *syntax.IfClause:
		return 16
	case *syntax.WhileClause:
		return 17
	case *syntax.ForClause:
		return 18
	case *syntax.WordIter:
		return 19
	case *syntax.CStyleLoop:
		return 20
	case *syntax.CaseClause:
		return 21
	case *syntax.CaseItem:
		return 22
	case *syntax.FuncDecl:
		return 23
	case *syntax.ArithmExp:
		return 24
	case *syntax.ArithmCmd:
		return 25
	case *syntax.BinaryArithm:
		return 26
	case *syntax.UnaryArithm:
		return 27
	case *syntax.ParenArithm:
		return 28
	case *syntax.ProcSubst:
		return 29
	case *syntax.TestClause:
		return 30
	case *syntax.BinaryTest:
		return 31
	case *syntax.UnaryTest:
		return 32
	case *syntax.ParenTest:
		return 33
	case *syntax.DeclClause:
		return 34
	case *syntax.ArrayExpr:
		return 35
	case *syntax.ArrayElem:
		return 36
	case *syntax.ExtGlob:
		return 37
	case *syntax.TimeClause:
		return 38
	case *syntax.CoprocClause:
		return 39
	case *syntax.LetClause:
		return 40
	case *syntax.BraceExp:
		return 41
	case *syntax.TestDecl:
		return 42
	}
	return tagOther
}
