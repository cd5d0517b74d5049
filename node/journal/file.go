package journal

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// A record on disk: its length (4 bytes), the CRC-32C of what follows
// (4 bytes), then the record as JSON.
const headerLen = 8

// maxRecord bounds one record: a larger length is damage, not a record.
const maxRecord = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func frame(r *Record) ([]byte, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(body) > maxRecord {
		return nil, fmt.Errorf("a record of %d bytes is over the journal's bound", len(body))
	}
	b := make([]byte, headerLen, headerLen+len(body))
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(body, castagnoli))
	return append(b, body...), nil
}

// errDamaged is a journal damaged before its last record.
var errDamaged = errors.New("damaged before its last record")

// replay reads the records of f from its start and returns the state
// they leave and the length of what was read whole. A last record cut
// short or failing its checksum was torn by a crash and is left out;
// damage anywhere else is errDamaged.
func replay(f *os.File) (*State, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	st := &State{}
	r := bufio.NewReaderSize(f, 1<<16)
	var good int64
	for {
		var hdr [headerLen]byte
		n, err := io.ReadFull(r, hdr[:])
		if err == io.EOF {
			return st, good, nil
		}
		if err != nil { // a header cut short: the last record, torn
			return st, good, nil
		}
		size := int64(binary.LittleEndian.Uint32(hdr[0:4]))
		end := good + int64(n) + size
		if size > maxRecord || end > info.Size() {
			if end > info.Size() && size <= maxRecord || zeroTail(f, good, info.Size()) {
				return st, good, nil // the last record, cut short
			}
			return nil, 0, fmt.Errorf("%w: a record of %d bytes at offset %d", errDamaged, size, good)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			return st, good, nil
		}
		var rec Record
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(hdr[4:8]) || json.Unmarshal(body, &rec) != nil {
			if end == info.Size() || zeroTail(f, good, info.Size()) {
				return st, good, nil // the last record, torn
			}
			return nil, 0, fmt.Errorf("%w: the record at offset %d fails its checksum", errDamaged, good)
		}
		st.apply(&rec)
		good = end
	}
}

// maxZeroTail bounds the zeros taken for a torn last record: more than
// one appended record's worth (they are a few kilobytes; a compaction's
// whole state goes to a file of its own) would be damage hiding records
// that were durable.
const maxZeroTail = 1 << 20

// zeroTail reports whether the file from offset from to its end (size)
// is zeros, at most maxZeroTail of them: what a crash leaves where a
// filesystem made the file's new size durable before its data (XFS, or
// ext4 with data=writeback), a torn last record.
func zeroTail(f *os.File, from, size int64) bool {
	n := size - from
	if n <= 0 || n > maxZeroTail {
		return false
	}
	buf := make([]byte, 64<<10)
	for off := from; off < size; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		for _, c := range buf[:k] {
			if c != 0 {
				return false
			}
		}
		off += int64(k)
		if err != nil && off < size {
			return false
		}
	}
	return true
}
