// Package tokenizer is pipeshard's tokenizer for Llama-family models. One
// type, Tokenizer, runs either of two models, so every caller works with
// both:
//
//   - SentencePiece-compatible BPE by scores with byte fallback, Llama 1
//     and 2's (GGUF tokenizer.ggml.model "llama"); and
//   - byte-level BPE with ranked merges and Llama 3's pre-tokenizer (GGUF
//     model "gpt2", tokenizer.ggml.pre "llama-bpe"); see "Byte-level BPE"
//     below.
//
// It also has a decoder that streams text as tokens are generated, and
// readers and writers for the vocabulary formats pipeshard meets
// (llama2.c's tokenizer.bin; GGUF's tokenizer.ggml.* keys through New,
// NewBPE, Vocab, Merges, Model and Pre).
//
// For stories15M it produces SentencePiece's own (Llama 2 tokenizer)
// encodings id for id; the tests check it against the oracle's reference
// encodings.
//
// # Loading
//
//	tok, err := tokenizer.LoadFor("tokenizer.bin", cfg.Vocab) // must match the model
//	tok, err := tokenizer.Load("tokenizer.bin")               // standalone: count from the file
//	tok, err := tokenizer.Parse(data, 32000)                  // from memory; InferVocab for any count
//	tok, err := tokenizer.New(pieces, scores, kinds, bos, eos, unk)
//	tok, err := tokenizer.NewBPE(tokens, merges, kinds, bos, eos, "llama-bpe") // Llama 3
//
// shards.TokenizerFromVocab builds either kind from a GGUF file's
// vocabulary, and shards.VocabOf turns one back into GGUF keys.
//
// A llama2.c tokenizer.bin is a little-endian int32 max_token_length
// followed by one record per token: float32 score, int32 byte length, the
// bytes. It does not store the number of tokens: the model implies it (32000
// for stories15M). LoadFor and Parse with a size therefore demand exactly
// that many records and otherwise fail with ErrMismatch naming both counts;
// Load and Parse with InferVocab accept whatever the file holds, which cannot
// tell a complete file from one cut at a record boundary.
//
// The format also has quirks that a loader keyed by string would get wrong.
// Ids 0, 1 and 2 are <unk>, BOS and EOS by convention (llama2.c hardcodes
// them), BOS and EOS stored as "\n<s>\n" and "\n</s>\n". Ids 3..258 are the
// byte-fallback tokens, byte b at id 3+b; the current llama2.c export spells
// them "<0xNN>", but older ones, stories15M's among them, wrote chr(b) in
// UTF-8: the raw byte for b < 0x80, the two-byte encoding of U+0080..U+00FF
// above. Either way the same string can then also be an ordinary piece (204
// strings occur twice in stories15M's file, e.g. "!" is byte token 36 and
// piece 29991). This package keeps every id: kinds are assigned by position,
// and only Normal pieces take part in encoding. Spaces are stored as ' '.
//
// Parse never panics and allocates at most a small multiple of the input:
// every length is checked against the rest of the file and against
// max_token_length (itself checked against the file) before anything is
// allocated, negative lengths and non-finite scores are rejected, and
// Load refuses files over MaxFileSize. Errors name the file, the token, its
// byte offset and the offending value, e.g.
//
//	tokenizer: truncated tokenizer file: tokenizer.bin: token 1234 at offset 5678: length 9999 exceeds the file (100 bytes left)
//	tokenizer: tokenizer does not match the model: tokenizer.bin holds 32000 tokens, the model's vocabulary has 32001
//
// # Vocabulary and kinds
//
// Every token has a Kind, whose values are GGUF's tokenizer.ggml.token_type
// codes: Normal (1) pieces are merged by the encoder and decode to their
// text; Unknown (2) stands for unspellable text; Control (3) tokens (BOS,
// EOS, ...) are never produced from text and decode to nothing; Byte (6)
// tokens decode to one raw byte (SentencePiece only). GGUF's user-defined
// (4) and unused (5) types are not supported; an importer must map them.
//
// New takes a vocabulary in SentencePiece/GGUF conventions (tokens with "▁"
// for spaces, byte tokens spelled "<0xNN>" and identified by their kind,
// scores, kinds, and the BOS, EOS and unknown ids), which is what
// tokenizer.ggml.tokens, .scores and .token_type plus the
// tokenizer.ggml.*_token_id keys hold. Vocab returns the same form, with
// llama2.c's ids 0..2 named "<unk>", "<s>" and "</s>": a GGUF written from
// it is accepted by llama.cpp (all token strings distinct), and New(Vocab())
// rebuilds the same tokenizer. Piece returns one token in this form, so
// pieces compare directly with SentencePiece's ("▁Once", "<0x0A>"). A
// byte-level BPE vocabulary has its own form, described below.
//
// # Encoding
//
// For a SentencePiece vocabulary, Encode(text, bos) runs SentencePiece's
// BPE as the Llama 2 tokenizer is configured (identity normalisation, dummy prefix, byte fallback) and as
// llama2.c reimplements it:
//
//  1. If text is non-empty, a space is prepended (the dummy prefix).
//  2. The text is split into UTF-8 characters. A byte of invalid UTF-8 is a
//     character of its own.
//  3. Repeatedly, among all adjacent pairs of symbols whose concatenation is
//     a Normal piece, the one whose piece has the highest score is merged;
//     ties go to the leftmost pair. This stops when no pair merges.
//  4. Each symbol that is a piece becomes its id (the lowest, should two
//     Normal pieces share a text). Any other symbol, a character outside the
//     vocabulary, becomes the byte tokens of its bytes ("😀" becomes
//     <0xF0><0x9F><0x98><0x80>), or the unknown token for a byte that has
//     none.
//
// Merging uses a priority queue over a linked list of symbols, so a prompt
// of n characters takes O(n log n) time. Moreover, since no merge can cross
// a boundary between two characters that are adjacent in no piece (for
// Llama, most word ends), each stretch between such boundaries is merged on
// its own with a small heap; the result is the same as one global pass.
// English prose encodes at about 10 MB/s (100 KB in about 10 ms). Text must
// be under 2 GiB. Text that spells a control token, like "<s>", is encoded
// as plain text. Two deliberate differences from SentencePiece, both
// outside what a Llama prompt normally contains: a literal "▁" (U+2581) in
// the text is an ordinary character here (SentencePiece reads it as a
// space), and invalid UTF-8 becomes byte tokens of the raw bytes
// (SentencePiece first replaces it with U+FFFD).
//
// # Byte-level BPE (Llama 3)
//
// NewBPE builds the tokenizer of Llama 3 (and 3.1, 3.2, 3.3), whose GGUF
// files say tokenizer.ggml.model "gpt2" and tokenizer.ggml.pre "llama-bpe";
// a file without the pre key, written before llama.cpp added it, is read
// the same way. Its vocabulary is ranked merges over bytes:
//
//   - Tokens are byte strings spelled with GPT-2's table of one printable
//     character per byte: bytes 33–126, 161–172 and 174–255 stand for
//     themselves, the other 68, in order, for U+0100 to U+0143. So a space
//     is "Ġ", "\n" is "Ċ", " world" is "Ġworld", "é" (C3 A9) is "Ã©" and
//     "😀" is "ðŁĺĢ". Piece and Vocab return tokens in this spelling;
//     control tokens ("<|begin_of_text|>", "<|eot_id|>") are spelled as
//     they are.
//   - Merges ("Ġ w", "Ġw or", ...) are ranked by position, best first.
//   - There are no scores (Score is 0), no Byte tokens and no unknown token
//     (Unk is -1): every byte has its own single-character token.
//
// Encode(text, bos) first cuts the text into pieces with Llama 3's
// pre-tokenizer, the regular expression
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// implemented as a hand-written scanner (Go's regexp has no lookahead)
// with the expression's exact semantics: at each position the first
// alternative that matches wins, each greedy. In words: a contraction
// suffix in any case; else a run of letters with at most one character
// before it that is not a letter, number or newline (a space, a tab, a
// bracket); else up to three numbers; else a run of punctuation and symbols
// with at most one space before it and any newlines after it; else
// whitespace: up to the last newline of the run if it has one, else the
// whole run if it ends the text, else the run but its last character,
// which goes with the next word. For example:
//
//	"Hello world"    "Hello" " world"
//	"  x"            " " " x"
//	"12345"          "123" "45"
//	"don't"          "don" "'t"
//	"I'M"            "I" "'M"
//	"a\n\nb"         "a" "\n\n" "b"
//	"a \n\n  b"      "a" " \n\n" " " " b"
//	"Hi!!\n\nx"      "Hi" "!!\n\n" "x"
//	"x   "           "x" "   "
//
// \p{L} and \p{N} are Unicode's letters and numbers, \s is Unicode's
// White_Space property (as Oniguruma, which Hugging Face's tokenizers use,
// defines it), and case-insensitivity is Unicode simple case folding ("'ſ"
// is a contraction). A byte of invalid UTF-8 is a character of none of
// these classes. Then:
//
//  1. A piece that is a whole Normal token becomes that token, as Llama 3
//     is configured (Hugging Face's ignore_merges; llama.cpp does the
//     same for llama-bpe).
//  2. Otherwise each byte of the piece becomes its single-byte token and,
//     repeatedly, the adjacent pair with the lowest merge rank is merged
//     (ties, which only equal pairs can have, go to the leftmost) until no
//     merge applies.
//  3. With bos, the BOS id (<|begin_of_text|>) comes first. No dummy
//     prefix is added, and text that spells a control token is encoded as
//     plain text.
//
// Decoding maps each token's characters back to bytes, holding back a
// partial UTF-8 character across tokens exactly as for byte tokens below.
// The Hugging Face tokenizer's optional clean-up of spaces before
// punctuation on decoding is not applied: Decode(Encode(s, bos)) == s for
// all valid UTF-8 s.
//
// Merging uses a heap over a linked list of a piece's bytes, so a piece of
// n bytes takes O(n log n) time, and the scanner is linear; TestEncodeWork
// counts the heap operations, BenchmarkEncode100KB measures the speed.
//
// # Decoding
//
// Decode(ids) and the streaming Decoder (NewDecoder, Next, Flush) follow
// one set of rules, and Next's outputs followed by Flush's concatenate to
// exactly Decode's result:
//
//   - Normal tokens give their text (for byte-level BPE, the bytes their
//     characters stand for, which may be part of a UTF-8 character), Byte
//     tokens their raw byte, Control tokens (BOS, EOS) nothing, Unknown
//     tokens U+FFFD.
//   - After BOS, one leading space is dropped from the next token that gives
//     text: it is the dummy prefix (SentencePiece removes it; llama2.c strips
//     a leading space after BOS). Without BOS nothing is dropped, so decoding
//     only a generated continuation keeps the space that separates it from
//     the prompt. Hence Decode(Encode(s, true)) == s for all valid UTF-8 s,
//     while Decode(Encode(s, false)) == " " + s. Byte-level BPE has no
//     dummy prefix, drops nothing, and Decode(Encode(s, bos)) == s either
//     way.
//   - Tokens that split a character are held back until the character
//     is complete, then emitted whole. Bytes that can no longer form valid
//     UTF-8 become U+FFFD (one per maximal ill-formed subpart, as Unicode
//     recommends) as soon as that is certain; Flush turns an incomplete tail
//     into U+FFFD. The output is always valid UTF-8.
//   - An id outside the vocabulary gives U+FFFD. DecodeChecked rejects such
//     ids instead, and CheckID tests one, both with an error wrapping
//     ErrTokenID: "token id 40000 outside the vocabulary of 32000".
//
// A streaming loop:
//
//	d := tok.NewDecoder()
//	for id := range generated {
//		if err := tok.CheckID(id); err != nil {
//			return err
//		}
//		fmt.Print(d.Next(id))
//	}
//	fmt.Print(d.Flush())
//
// # Concurrency
//
// A Tokenizer is immutable after construction: any number of goroutines may
// encode and decode with it at once. A Decoder holds one stream's state and
// must not be shared; Flush resets it for reuse.
package tokenizer
