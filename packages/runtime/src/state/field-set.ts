import type { FieldError, JsonSchema } from '@reactor/protocol';
import { getMetadataStorage, validate, validateSync, type ValidationError } from 'class-validator';
import { targetConstructorToSchema } from 'class-validator-jsonschema';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { type InputFieldOptions, readInputFields } from '../metadata/keys.js';
import { toSnakeCase } from '../metadata/naming.js';
import { realCauses, unknownKey } from './field-errors.js';
import { UPLOAD_MIME_TYPES } from '../upload/sniff.js';
import { UploadedFile } from '../upload/uploaded-file.js';

/** What an `@UploadField` accepts. */
export interface UploadSpec {
  /** Largest file, bytes; `undefined`: the server's limit. */
  readonly maxBytes: number | undefined;
  /** Accepted types (or families, `image/*`); `undefined`: every type the server accepts. */
  readonly mimeTypes: readonly string[] | undefined;
}

/** Constraint name of a value that is not a resolved upload reference. */
export const UPLOAD_REF_CONSTRAINT = 'isUploadRef';

/** One declared field, compiled. */
export interface FieldSpec {
  readonly property: string;
  /** snake_case name on the wire. */
  readonly wire: string;
  /** `_`-prefixed: never exposed, never settable. */
  readonly isPrivate: boolean;
  readonly options: InputFieldOptions;
  readonly hasDefault: boolean;
  /** JSON Schema of the value (constraints + description). */
  readonly schema: JsonSchema;
  /** Present for an `@UploadField`: the value is an {@link UploadedFile}. */
  readonly upload?: UploadSpec;
}

/** `@InputField({ keys })`: a map of single keyboard keys to non-empty strings (lower case keys). */
function checkKeys(cls: string, prop: string, keys: unknown): Record<string, string> {
  const fix = 'give keys as { [KeyboardEvent.key in lower case]: the value held }, e.g. { w: "forward" }';
  if (keys === null || typeof keys !== 'object' || Array.isArray(keys))
    throw new AppDefinitionError(RuntimeErrorCode.InvalidStateField, cls, prop, `keys must be an object; ${fix}`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(keys as Record<string, unknown>)) {
    if (k === '' || k !== k.toLowerCase() || typeof v !== 'string' || v === '') {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidStateField,
        cls,
        prop,
        `keys entry ${JSON.stringify(k)}: ${JSON.stringify(v)} is not a lower-case key to a non-empty string; ${fix}`,
      );
    }
    out[k] = v;
  }
  return out;
}

/** Result of validating a payload. */
export type Validated<T> = { ok: true; value: T } | { ok: false; errors: FieldError[] };

// Unknown payload keys never reach the instance: validatePayload reports them itself, with
// class-validator's whitelist constraint name, because wire names differ from property names.
const VALIDATE_OPTIONS = { forbidUnknownValues: false } as const;

/**
 * The compiled fields of a state or params class: defaults, validation, wire names, schema.
 * Built once per class at registration ({@link FieldSet.compile}); all checks run there.
 */
export class FieldSet<T extends object = object> {
  readonly fields: readonly FieldSpec[];
  readonly publicFields: readonly FieldSpec[];
  private readonly byWire: Map<string, FieldSpec>;

  private constructor(
    readonly cls: new () => T,
    fields: FieldSpec[],
  ) {
    this.fields = fields;
    this.publicFields = fields.filter((f) => !f.isPrivate);
    this.byWire = new Map(this.publicFields.map((f) => [f.wire, f]));
  }

  /**
   * Scans `cls` and checks it: every `@InputField` has at least one class-validator constraint,
   * no public constrained field lacks `@InputField`, defaults are immutable and satisfy their
   * own constraints, wire names are unique.
   * @throws AppDefinitionError naming the class and the field.
   */
  static compile<T extends object>(cls: new () => T): FieldSet<T> {
    const records = readInputFields(cls);
    const metas = getMetadataStorage().getTargetValidationMetadatas(cls, '', true, false);
    const constrained = new Set(metas.map((m) => m.propertyName));
    const declared = new Set(records.map((r) => r.property));
    for (const prop of constrained) {
      if (!declared.has(prop) && !prop.startsWith('_')) {
        throw new AppDefinitionError(
          RuntimeErrorCode.UndeclaredField,
          cls.name,
          prop,
          'has class-validator constraints but no @InputField; add @InputField({ default, description }) so it becomes part of the state or params',
        );
      }
    }
    let jsonSchema: JsonSchema = {};
    try {
      jsonSchema = targetConstructorToSchema(cls) as JsonSchema;
    } catch (cause) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidStateField,
        cls.name,
        undefined,
        `its constraints cannot be turned into JSON Schema: ${(cause as Error).message}`,
      );
    }
    const props = (jsonSchema.properties ?? {}) as Record<string, JsonSchema>;
    const wires = new Map<string, string>();
    const fields: FieldSpec[] = [];
    for (const r of records) {
      const isPrivate = r.property.startsWith('_');
      const wire = toSnakeCase(r.property);
      if (r.upload && isPrivate) {
        throw new AppDefinitionError(
          RuntimeErrorCode.InvalidStateField,
          cls.name,
          r.property,
          'is a private (_-prefixed) @UploadField; clients could never set it: drop the underscore, or keep a private field with @InputField',
        );
      }
      if (!isPrivate) {
        if (!r.upload && !constrained.has(r.property)) {
          throw new AppDefinitionError(
            RuntimeErrorCode.UnvalidatedField,
            cls.name,
            r.property,
            'has no class-validator constraint, so clients could set it to anything; add one (e.g. @IsString(), @IsNumber(), @IsBoolean(), @IsIn([...]))',
          );
        }
        const other = wires.get(wire);
        if (other !== undefined) {
          throw new AppDefinitionError(
            RuntimeErrorCode.InvalidStateField,
            cls.name,
            r.property,
            `has the same wire name "${wire}" as field ${other}; rename one`,
          );
        }
        wires.set(wire, r.property);
      }
      const o = r.options;
      if ('default' in o && o.defaultFactory !== undefined) {
        throw new AppDefinitionError(RuntimeErrorCode.InvalidDefault, cls.name, r.property, 'declares both default and defaultFactory; keep one');
      }
      if (o.defaultFactory !== undefined && typeof o.defaultFactory !== 'function') {
        throw new AppDefinitionError(RuntimeErrorCode.InvalidDefault, cls.name, r.property, 'defaultFactory must be a function returning the initial value');
      }
      if ('default' in o && isMutable(o.default)) {
        throw new AppDefinitionError(
          RuntimeErrorCode.MutableDefault,
          cls.name,
          r.property,
          `default is a mutable ${Array.isArray(o.default) ? 'array' : typeof o.default === 'function' ? 'function' : 'object'} that every session would share; use defaultFactory: () => (a fresh value), or Object.freeze() it`,
        );
      }
      if (r.upload) {
        fields.push({
          property: r.property,
          wire,
          isPrivate,
          options: o,
          hasDefault: r.hasDefault,
          schema: uploadRefSchema(r.upload, o.description),
          upload: r.upload,
        });
        continue;
      }
      const schema: JsonSchema = { ...(props[r.property] ?? {}) };
      if (o.description !== undefined) schema.description = o.description;
      if ('default' in o && o.default !== undefined) schema.default = o.default;
      if (o.moderate) schema['x-moderate'] = true;
      if (o.keys !== undefined) schema['x-reactor-keys'] = checkKeys(cls.name, r.property, o.keys);
      fields.push({ property: r.property, wire, isPrivate, options: o, hasDefault: r.hasDefault, schema });
    }
    const set = new FieldSet(cls, fields);
    set.checkDefaults();
    return set;
  }

  private checkDefaults(): void {
    const instance = this.createDefaults();
    const errors = validateSync(instance, { forbidUnknownValues: false });
    for (const e of errors) {
      const field = this.fields.find((f) => f.property === e.property);
      if (!field?.hasDefault) continue;
      const messages = Object.values(e.constraints ?? {}).join('; ');
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidDefault,
        this.cls.name,
        field.property,
        `default ${JSON.stringify((instance as Record<string, unknown>)[field.property])} breaks its own constraints (${messages}); fix the default or the constraint`,
      );
    }
  }

  /** A fresh instance with every default applied (factories called once each). */
  createDefaults(): T {
    const instance = new this.cls();
    const bag = instance as Record<string, unknown>;
    for (const f of this.fields) {
      if (f.options.defaultFactory) bag[f.property] = f.options.defaultFactory();
      else if ('default' in f.options) bag[f.property] = f.options.default;
    }
    return instance;
  }

  /** The field a wire name denotes, if public. */
  field(wire: string): FieldSpec | undefined {
    return this.byWire.get(wire);
  }

  /** Public values by wire name (the `state` the clients see). */
  snapshot(instance: T): Record<string, unknown> {
    const bag = instance as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const f of this.publicFields) {
      const v = bag[f.property];
      out[f.wire] = f.upload ? (v instanceof UploadedFile ? v.toJSON() : null) : v;
    }
    return out;
  }

  /** JSON Schema of the public fields as an object (`additionalProperties: false`). */
  objectSchema(fields: readonly FieldSpec[] = this.publicFields, requiredOverride?: readonly string[]): JsonSchema {
    const properties: Record<string, JsonSchema> = {};
    for (const f of fields) properties[f.wire] = f.schema;
    const required = requiredOverride ?? fields.filter((f) => !f.hasDefault).map((f) => f.wire);
    const schema: JsonSchema = { type: 'object', properties, additionalProperties: false };
    if (required.length > 0) schema.required = [...required];
    return schema;
  }

  /**
   * Validates a full params payload (wire names): unknown or private keys are rejected
   * (`whitelistValidation`), missing required fields reported (`required`), defaults applied,
   * then class-validator runs.
   */
  async validatePayload(payload: Record<string, unknown>): Promise<Validated<T>> {
    const errors: FieldError[] = [];
    const instance = new this.cls();
    const bag = instance as Record<string, unknown>;
    for (const key of Object.keys(payload)) {
      if (!this.byWire.has(key)) errors.push(unknownKey(key));
    }
    const missing = new Set<string>();
    for (const f of this.fields) {
      if (!f.isPrivate && Object.prototype.hasOwnProperty.call(payload, f.wire)) bag[f.property] = payload[f.wire];
      else if (f.options.defaultFactory) bag[f.property] = f.options.defaultFactory();
      else if ('default' in f.options) bag[f.property] = f.options.default;
      else if (!f.isPrivate) {
        missing.add(f.property);
        errors.push({ field: f.wire, constraint: 'required', message: `${f.wire} is required` });
      }
    }
    const found = await validate(instance, VALIDATE_OPTIONS);
    for (const e of found) if (!missing.has(e.property)) errors.push(...this.toFieldErrors(e));
    for (const f of this.publicFields) {
      if (f.upload && !missing.has(f.property) && !(bag[f.property] instanceof UploadedFile)) errors.push(notAnUploadRef(f));
    }
    return errors.length > 0 ? { ok: false, errors } : { ok: true, value: instance };
  }

  /** Validates one public field's new value (a generated setter). */
  async validateField(field: FieldSpec, value: unknown): Promise<FieldError[]> {
    if (field.upload) return value instanceof UploadedFile ? [] : [notAnUploadRef(field)];
    const probe = Object.create(this.cls.prototype as object) as Record<string, unknown>;
    probe[field.property] = value;
    const found = await validate(probe, { forbidUnknownValues: false });
    return found.filter((e) => e.property === field.property).flatMap((e) => this.toFieldErrors(e));
  }

  private toFieldErrors(e: ValidationError): FieldError[] {
    const f = this.fields.find((x) => x.property === e.property);
    const wire = f?.wire ?? e.property;
    const out: FieldError[] = [];
    for (const [constraint, message] of realCauses(Object.entries(e.constraints ?? {}))) {
      out.push({ field: wire, constraint, message: message.startsWith(e.property) ? wire + message.slice(e.property.length) : message });
    }
    for (const child of e.children ?? []) {
      for (const c of this.toFieldErrors(child)) out.push({ ...c, field: `${wire}.${c.field}` });
    }
    if (out.length === 0) out.push({ field: wire, constraint: 'invalid', message: `${wire} is invalid` });
    return out;
  }
}

/**
 * JSON Schema of an upload field: the reference a command carries (`{"uploadId": "..."}`), with
 * an `x-reactor-upload` marker saying what it accepts (`maxBytes` when declared; `mimeTypes`,
 * the declared ones or every type the server accepts).
 */
export function uploadRefSchema(upload: UploadSpec, description?: string): JsonSchema {
  const marker: Record<string, unknown> = {};
  if (upload.maxBytes !== undefined) marker.maxBytes = upload.maxBytes;
  marker.mimeTypes = [...(upload.mimeTypes ?? UPLOAD_MIME_TYPES)];
  return {
    type: 'object',
    properties: { uploadId: { type: 'string' } },
    required: ['uploadId'],
    additionalProperties: false,
    ...(description !== undefined ? { description } : {}),
    'x-reactor-upload': marker,
  };
}

/** The answer detail for an upload field whose value is not a reference to a stored upload. */
function notAnUploadRef(f: FieldSpec): FieldError {
  return {
    field: f.wire,
    constraint: UPLOAD_REF_CONSTRAINT,
    message: `${f.wire} must be an upload reference {"uploadId": "..."}: POST /uploads, PUT the bytes, then send the uploadId`,
  };
}

function isMutable(value: unknown): boolean {
  if (typeof value === 'function') return true;
  if (value === null || typeof value !== 'object') return false;
  return !deepFrozen(value);
}

function deepFrozen(value: object): boolean {
  if (!Object.isFrozen(value)) return false;
  return Object.values(value).every((v) => v === null || typeof v !== 'object' || deepFrozen(v as object));
}
