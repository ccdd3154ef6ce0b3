/* vec.h: reads the test vectors the C and the Go side of a rule share
 * (the testdata/ .vec files at the repository root; the format is in
 * testdata/README.md, the Go reader is tests/testvec). Header-only: one
 * test program includes it. Any malformed file ends the program (exit 2). */
#ifndef MUXFLOW_VEC_H
#define MUXFLOW_VEC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vec_val {
	char *s; /* NUL-terminated; may also hold NULs (see len) */
	size_t len;
};

struct vec_line {
	char *key;
	int n;
	struct vec_val *v;
	int lineno;
};

struct vec_rec {
	int n;
	struct vec_line *l;
	int lineno;
};

struct vec_file {
	const char *name;
	int n;
	struct vec_rec *r;
};

static inline void vec_die(const char *name, int lineno, const char *why)
{
	fprintf(stderr, "vec: %s:%d: %s\n", name, lineno, why);
	exit(2);
}

static inline int vec_hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* vec_unquote reads the string at *p (at its opening quote), Go escapes. */
static inline struct vec_val vec_unquote(const char **p, const char *end, const char *name, int lineno)
{
	const char *s = *p + 1;
	char *out = malloc((size_t)(end - s) + 1), *w = out;
	for (;;) {
		if (s >= end)
			vec_die(name, lineno, "unterminated string");
		if (*s == '"')
			break;
		if (*s != '\\') {
			*w++ = *s++;
			continue;
		}
		if (++s >= end)
			vec_die(name, lineno, "escape at the end of a line");
		switch (*s++) {
		case '\\': *w++ = '\\'; break;
		case '"': *w++ = '"'; break;
		case 'n': *w++ = '\n'; break;
		case 'r': *w++ = '\r'; break;
		case 't': *w++ = '\t'; break;
		case 'a': *w++ = '\a'; break;
		case 'b': *w++ = '\b'; break;
		case 'f': *w++ = '\f'; break;
		case 'v': *w++ = '\v'; break;
		case 'x': {
			int hi = s + 1 < end ? vec_hex(s[0]) : -1, lo = hi >= 0 ? vec_hex(s[1]) : -1;
			if (lo < 0)
				vec_die(name, lineno, "bad \\x escape");
			*w++ = (char)(hi << 4 | lo);
			s += 2;
			break;
		}
		case 'u': {
			unsigned r = 0;
			for (int i = 0; i < 4; i++) {
				int h = s + i < end ? vec_hex(s[i]) : -1;
				if (h < 0)
					vec_die(name, lineno, "bad \\u escape");
				r = r << 4 | (unsigned)h;
			}
			s += 4;
			if (r >= 0xd800 && r < 0xe000)
				vec_die(name, lineno, "\\u escape of a surrogate");
			if (r < 0x80) {
				*w++ = (char)r;
			} else if (r < 0x800) {
				*w++ = (char)(0xc0 | r >> 6);
				*w++ = (char)(0x80 | (r & 0x3f));
			} else {
				*w++ = (char)(0xe0 | r >> 12);
				*w++ = (char)(0x80 | ((r >> 6) & 0x3f));
				*w++ = (char)(0x80 | (r & 0x3f));
			}
			break;
		}
		default:
			vec_die(name, lineno, "unknown escape");
		}
	}
	*p = s + 1;
	*w = '\0';
	return (struct vec_val){out, (size_t)(w - out)};
}

/* vec_load reads dir/name. */
static inline void vec_load(const char *dir, const char *name, struct vec_file *f)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		perror(path);
		exit(2);
	}
	static char buf[1 << 20];
	size_t size = fread(buf, 1, sizeof buf - 1, fp);
	fclose(fp);
	buf[size] = '\0';
	memset(f, 0, sizeof *f);
	f->name = name;
	struct vec_rec *cur = NULL;
	int lineno = 0;
	for (const char *p = buf; p < buf + size;) {
		const char *eol = memchr(p, '\n', (size_t)(buf + size - p));
		if (!eol)
			eol = buf + size;
		lineno++;
		const char *s = p;
		p = eol + 1;
		while (s < eol && (*s == ' ' || *s == '\t'))
			s++;
		if (s == eol) {
			cur = NULL;
			continue;
		}
		if (*s == '#')
			continue;
		if (!cur) {
			f->r = realloc(f->r, sizeof *f->r * (size_t)(f->n + 1));
			cur = &f->r[f->n++];
			memset(cur, 0, sizeof *cur);
			cur->lineno = lineno;
		}
		cur->l = realloc(cur->l, sizeof *cur->l * (size_t)(cur->n + 1));
		struct vec_line *l = &cur->l[cur->n++];
		memset(l, 0, sizeof *l);
		l->lineno = lineno;
		const char *k = s;
		while (s < eol && *s != ' ' && *s != '\t')
			s++;
		l->key = strndup(k, (size_t)(s - k));
		for (;;) {
			while (s < eol && (*s == ' ' || *s == '\t'))
				s++;
			if (s >= eol || *s == '\r')
				break;
			l->v = realloc(l->v, sizeof *l->v * (size_t)(l->n + 1));
			if (*s == '"') {
				l->v[l->n++] = vec_unquote(&s, eol, name, lineno);
			} else {
				const char *b = s;
				while (s < eol && *s != ' ' && *s != '\t')
					s++;
				l->v[l->n++] = (struct vec_val){strndup(b, (size_t)(s - b)), (size_t)(s - b)};
			}
		}
	}
	if (f->n == 0)
		vec_die(name, lineno, "no record");
}

static inline const struct vec_line *vec_get(const struct vec_rec *r, const char *key)
{
	for (int i = 0; i < r->n; i++)
		if (strcmp(r->l[i].key, key) == 0)
			return &r->l[i];
	return NULL;
}

/* vec_str is the first value of key, or def. */
static inline const char *vec_str(const struct vec_rec *r, const char *key, const char *def)
{
	const struct vec_line *l = vec_get(r, key);
	return l && l->n > 0 ? l->v[0].s : def;
}

/* vec_val is the first value of key with its length; NULL when absent. */
static inline const struct vec_val *vec_val(const struct vec_rec *r, const char *key)
{
	const struct vec_line *l = vec_get(r, key);
	return l && l->n > 0 ? &l->v[0] : NULL;
}

static inline const char *vec_kind(const struct vec_rec *r)
{
	return r->l[0].key;
}

static inline const char *vec_name(const struct vec_rec *r)
{
	return r->l[0].n > 0 ? r->l[0].v[0].s : "";
}

static inline void vec_free(struct vec_file *f)
{
	for (int i = 0; i < f->n; i++) {
		for (int j = 0; j < f->r[i].n; j++) {
			struct vec_line *l = &f->r[i].l[j];
			for (int k = 0; k < l->n; k++)
				free(l->v[k].s);
			free(l->v);
			free(l->key);
		}
		free(f->r[i].l);
	}
	free(f->r);
	memset(f, 0, sizeof *f);
}

#endif
